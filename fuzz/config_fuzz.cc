// A YAML config file as an operator writes it (`sluice ROLE --config FILE`),
// for every role. The file is a memfd: no disk per input.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "sluice_cli/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const int fd = ::memfd_create("sluice-config-fuzz", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  static const std::set<std::string> roles = {"serve",        "master", "store-node",
                                              "orchestrator", "worker", "generate"};
  if (fd < 0 || ::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    std::abort();
  }
  for (const std::string& role : roles) {
    (void)sluice::cli::ExpandConfig({role, "--config", path, "--flag"}, roles);
  }
  return 0;
}
