// The orchestrator's --api-keys file (AccessConfig::Load: keys -> tenants,
// tenant limits) as an operator writes it. The file is a memfd: no disk per
// input. Whatever the bytes, Load answers a Status; anything it accepts
// has at least one key and only finite, non-negative limits.
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "sluice/orchestrator/server.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const int fd = ::memfd_create("sluice-api-keys-fuzz", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    std::abort();
  }
  sluice::Result<sluice::AccessConfig> c = sluice::AccessConfig::Load(path);
  if (c.ok()) {
    if (c->keys.empty()) {
      std::abort();  // "keys" is required and non-empty.
    }
    for (const auto& [tenant, l] : c->tenants) {
      for (double v : {l.requests_per_second, l.burst, l.queue_share}) {
        if (!std::isfinite(v) || v < 0) {
          std::abort();
        }
      }
    }
  }
  return 0;
}
