// A plain TCP socket moving what a benchmark moves, as its baseline on the
// same link in the same run: the target (`sluice bench transfer-target`)
// serves one connection per measurement; the client streams to it (a
// write) or from it (a read) for a while and counts the bytes.
#ifndef SLUICE_BENCH_SOCKET_BASELINE_H_
#define SLUICE_BENCH_SOCKET_BASELINE_H_

#include <cstdint>
#include <string>

#include "sluice/status.h"

namespace sluice::bench {

// Target side: serves baseline connections on `listen_fd` until it is
// closed, reading into or sending from `region` (`region_size` bytes).
void ServeSocketBaseline(int listen_fd, char* region, std::uint64_t region_size);

// Client side: connects to `address` (IPv4) : `port` and moves `block`-byte
// writes from `buf` (or reads into it, when `target_sends`) for
// `duration_s`; GB/s (10^9 bytes/s) moved. Errors: kInvalidArgument (not
// an IPv4 address), kUnavailable (no connection).
Result<double> SocketBaselineGbps(const std::string& address, std::uint16_t port, bool target_sends,
                                  std::uint64_t block, double duration_s, char* buf);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_SOCKET_BASELINE_H_
