#include "device/backends.h"

#include <map>
#include <string>

#include "common/mutex.h"
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

Result<DeviceBackend*> ProcessBackend(std::string_view name) {
  // Never destroyed: engines and tensors may outlive any static's order.
  static auto* const mu = new Mutex;
  static auto* const made = new std::map<std::string, std::unique_ptr<DeviceBackend>, std::less<>>;
  MutexLock lock(*mu);
  if (auto it = made->find(name); it != made->end()) {
    return it->second.get();
  }
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<DeviceBackend> b, MakeDeviceBackend(name));
  DeviceBackend* out = b.get();
  made->emplace(std::string(name), std::move(b));
  return out;
}

}  // namespace sluice::device
