// DLPack in the _sluice module: tensors of any framework that implements
// `__dlpack__` (torch, numpy >= 1.22, CuPy, JAX) are read from their DLPack
// capsule, and sluice's simulated device memory is exported as one. Errors
// raise a StatusException (mapped to _sluice.StatusError).
#ifndef SLUICE_PYTHON_DLPACK_H_
#define SLUICE_PYTHON_DLPACK_H_

#include <pybind11/pybind11.h>

#include "sluice/connector/tensor.h"
#include "sluice/status.h"

#include "binding_util.h"

namespace sluice::python {

// The tensor a "dltensor" capsule describes, neither consumed nor copied:
// the capsule's owner keeps the memory, so the caller must hold the tensor
// it came from for as long as the view is used. CPU and CUDA-host memory
// are host memory, CUDA memory is device memory, and sluice's sim devices
// (kDLExtDev) are device memory. Refused, naming `what` and the reason:
// another device type (named), a dtype sluice has no name for, vector
// lanes, rank 0 or above 8, a non-contiguous layout.
TensorView FromDlpack(const pybind11::capsule& capsule, const std::string& what);

// Adds _sluice.dlpack_tensor(capsule, what) -> (pointer, dtype, shape,
// memory, device) and _sluice.SimMemory (device memory of the process's sim
// backend, exported with dlpack(offset, dtype, shape, strides)).
void RegisterDlpack(pybind11::module_& m);

}  // namespace sluice::python

#endif  // SLUICE_PYTHON_DLPACK_H_
