#include "device/backends.h"

#include <string>

#include "device/cuda_backend.h"
#include "device/sim_backend.h"

namespace sluice::device {

Result<std::unique_ptr<DeviceBackend>> MakeDeviceBackend(std::string_view name) {
  if (name == "sim") {
    return MakeSimBackend();
  }
  if (name == "cuda") {
    return MakeCudaBackend();
  }
  return InvalidArgumentError("unknown device backend \"" + std::string(name) +
                              "\" (known: sim, cuda)");
}

}  // namespace sluice::device
