// The cache layer in the _sluice module (sluice.cache wraps it): standard
// keys computed by the C++ code (for the test that compares them with
// sluice.cache's own) and the single-flight cache on a _sluice.Store.
#ifndef SLUICE_PYTHON_CACHE_BINDING_H_
#define SLUICE_PYTHON_CACHE_BINDING_H_

#include <pybind11/pybind11.h>

#include "sluice/cache/cache.h"

namespace sluice::python {

// Adds _sluice.Cache and _sluice.cache_make_key.
void RegisterCache(pybind11::module_& m);

// The cache of a _sluice.Cache object, valid while that object lives.
// Throws StatusException (kInvalidArgument) for anything else.
const cache::Cache* CacheOf(const pybind11::handle& c);

}  // namespace sluice::python

#endif  // SLUICE_PYTHON_CACHE_BINDING_H_
