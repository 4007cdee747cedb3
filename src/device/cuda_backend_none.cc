// The cuda backend in a build without the CUDA toolkit (SLUICE_CUDA=OFF, or
// AUTO where CMake did not find it).
#include "device/cuda_backend.h"

namespace sluice::device {

bool CudaBuilt() {
  return false;
}

Result<std::unique_ptr<DeviceBackend>> MakeCudaBackend() {
  return UnimplementedError(
      "cuda device: this build has no CUDA backend (configure with -DSLUICE_CUDA=ON on a machine "
      "with the CUDA toolkit)");
}

}  // namespace sluice::device
