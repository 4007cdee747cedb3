// The cache layer in the _sluice module (sluice.cache wraps it): standard
// keys computed by the C++ code (for the test that compares them with
// sluice.cache's own) and the single-flight cache on a _sluice.Store.
#ifndef SLUICE_PYTHON_CACHE_BINDING_H_
#define SLUICE_PYTHON_CACHE_BINDING_H_

#include <pybind11/pybind11.h>

namespace sluice::python {

// Adds _sluice.Cache and _sluice.cache_make_key.
void RegisterCache(pybind11::module_& m);

}  // namespace sluice::python

#endif  // SLUICE_PYTHON_CACHE_BINDING_H_
