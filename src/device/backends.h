// Device backends by name, for configs, flags and tests.
#ifndef SLUICE_DEVICE_BACKENDS_H_
#define SLUICE_DEVICE_BACKENDS_H_

#include <memory>
#include <string_view>

#include "device/backend.h"

namespace sluice::device {

// "sim" (sim_backend.h, default options) or "cuda" (cuda_backend.h).
// Errors: kInvalidArgument naming an unknown backend; the backend's own
// (kUnimplemented: cuda in a build without it; kUnavailable: no device).
Result<std::unique_ptr<DeviceBackend>> MakeDeviceBackend(std::string_view name);

// The process's backend of that name, made at its first use and kept for
// the life of the process, as a device runtime is: every engine and
// connector of a process shares it, so memory one allocates another moves.
// Thread-safe. Errors: those of MakeDeviceBackend (a failed start is not
// kept: a later call tries again).
Result<DeviceBackend*> ProcessBackend(std::string_view name);

}  // namespace sluice::device

#endif  // SLUICE_DEVICE_BACKENDS_H_
