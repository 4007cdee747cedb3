// Pieces shared by the `sluice bench` workloads: helper processes, warm
// memory, percentiles.
#ifndef SLUICE_BENCH_BENCH_UTIL_H_
#define SLUICE_BENCH_BENCH_UTIL_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::device {
class DeviceBackend;
}  // namespace sluice::device

namespace sluice::bench {

// A helper process (`sluice` itself in another role). Its first stdout line
// must start with "READY "; the rest is returned by banner(). Destruction
// closes its stdin, sends SIGTERM, and SIGKILLs it if it lingers.
class BenchChild {
 public:
  static Result<std::unique_ptr<BenchChild>> Spawn(std::vector<std::string> args);
  ~BenchChild();
  const std::string& banner() const { return banner_; }
  // Word `i` of the banner (after "READY").
  std::string Word(int i) const;
  pid_t pid() const { return pid_; }

 private:
  BenchChild() = default;
  pid_t pid_ = -1;
  int in_fd_ = -1;
  int out_fd_ = -1;
  std::string banner_;
};

// Anonymous memory, pre-faulted so no page fault lands inside a measurement.
struct WarmMemory {
  explicit WarmMemory(std::size_t n);
  ~WarmMemory();
  WarmMemory(const WarmMemory&) = delete;
  WarmMemory& operator=(const WarmMemory&) = delete;
  char* data = nullptr;
  std::size_t size = 0;
};

// `size` bytes of device 0 memory of the process's `device` backend ("sim"
// or "cuda"), freed on destruction (null data and `error` set when it could
// not be had; nothing for 0 bytes).
struct DeviceMemory {
  DeviceMemory(const std::string& device, std::size_t size);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  // Copies `len` host bytes to the start of the memory; returns when done.
  Status CopyIn(const void* host, std::size_t len);
  device::DeviceBackend* backend = nullptr;
  char* data = nullptr;
  Status error;
};

// A benchmark's target on another host (a network namespace on this
// machine): kInvalidArgument unless `address` is IPv4 and `netns`, when
// given, names a namespace ([A-Za-z0-9._-], at most 64) with `transport`
// tcp (shared memory does not cross hosts).
Status ValidateTargetHost(const std::string& netns, const std::string& address,
                          const std::string& transport);
// `args` run inside `netns` (`ip netns exec`), or as they are when it is
// empty.
std::vector<std::string> OnTargetHost(const std::string& netns, std::vector<std::string> args);

// The p-quantile (0..1) of `v` (reorders it); 0 for an empty vector.
double Percentile(std::vector<double>& v, double p);

// A cluster token file (mode 0600, a fresh random token) for a benchmark's
// credential run, removed with the object.
struct TokenFile {
  std::string path;
  TokenFile() = default;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();
};
// Creates `t`'s file in /tmp and returns its path. Errors: kInternal.
Result<std::string> WriteTokenFile(TokenFile* t);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_BENCH_UTIL_H_
