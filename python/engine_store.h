// The transfer engine and the store client in the _sluice module
// (sluice.TransferEngine, sluice.Store wrap them): memory is given as
// (pointer, length, memory, device) read from each tensor's DLPack capsule.
#ifndef SLUICE_PYTHON_ENGINE_STORE_H_
#define SLUICE_PYTHON_ENGINE_STORE_H_

#include <pybind11/pybind11.h>

#include "sluice/store/client.h"

#include "binding_util.h"

namespace sluice::python {

// Adds _sluice.Engine and _sluice.Store.
void RegisterEngineAndStore(pybind11::module_& m);

// The client of a _sluice.Store object, valid until the store is closed.
// Throws StatusException (kFailedPrecondition: closed; kInvalidArgument:
// not a _sluice.Store).
StoreClient& StoreClientOf(const pybind11::object& store);

}  // namespace sluice::python

#endif  // SLUICE_PYTHON_ENGINE_STORE_H_
