// `cuda`: the device backend over the CUDA runtime. Built when CMake finds
// the CUDA toolkit (-DSLUICE_CUDA=AUTO|ON); the data path reaches it only
// through DeviceBackend (backend.h).
//  - Allocate / Free: cudaMalloc / cudaFree on the asked device; the backend
//    keeps its allocations (and the IPC allocations it opened) so a copy's
//    device range is checked against its allocation before it is queued.
//  - AllocatePinned: cudaHostAlloc (portable), pre-faulted.
//  - Streams: non-blocking streams, one per CreateStream; copies are
//    cudaMemcpyAsync with cudaMemcpyDefault (unified addressing tells the
//    direction); events are timing-free CUDA events.
//  - IPC: cudaIpcGetMemHandle / cudaIpcOpenMemHandle (peer access enabled
//    lazily); the handle also carries the allocation's length and device.
//  - Attributes: the backend's own allocations first, else
//    cudaPointerGetAttributes (memory the framework allocated: a torch
//    tensor, say), where the allocation's extent is unknown (length 0).
#ifndef SLUICE_DEVICE_CUDA_BACKEND_H_
#define SLUICE_DEVICE_CUDA_BACKEND_H_

#include <memory>

#include "device/backend.h"

namespace sluice::device {

// Whether this build has the cuda backend (the toolkit was found).
bool CudaBuilt();

// The cuda backend over every device the runtime sees.
// Errors: kUnimplemented (built without CUDA); kUnavailable (no driver, no
// device, or the runtime refused to start), naming the runtime's error.
Result<std::unique_ptr<DeviceBackend>> MakeCudaBackend();

}  // namespace sluice::device

#endif  // SLUICE_DEVICE_CUDA_BACKEND_H_
