// `sim`: a device backend over host memory that behaves like a device, so
// every device code path runs on a machine without one.
//  - Device memory is a memfd mapped twice: the address handed out is a
//    PROT_NONE view (any CPU touch of it faults, in every build, with the
//    sanitizers' report under them), and the backend copies through a
//    private read-write alias of the same pages.
//  - Copies run asynchronously, in order, on one thread per stream.
//  - IPC handles name the memfd (pid, fd, inode); another process on the
//    host opens it through /proc/<pid>/fd, as a device runtime's IPC does.
#ifndef SLUICE_DEVICE_SIM_BACKEND_H_
#define SLUICE_DEVICE_SIM_BACKEND_H_

#include <memory>

#include "device/backend.h"

namespace sluice::device {

struct SimOptions {
  int devices = 2;                              // 1..16
  std::size_t capacity = std::size_t{4} << 30;  // Bytes of memory per device.
};

// Errors: kInvalidArgument for options out of range.
Result<std::unique_ptr<DeviceBackend>> MakeSimBackend(const SimOptions& options = {});

}  // namespace sluice::device

#endif  // SLUICE_DEVICE_SIM_BACKEND_H_
