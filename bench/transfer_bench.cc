#include "bench/transfer_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "sluice/units.h"

#include "bench/bench_util.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kMaxArea = std::uint64_t{8} << 30;

struct BaselineHello {
  std::uint32_t target_sends = 0;  // 1: target streams to us (read); 0: we stream to it.
  std::uint32_t pad = 0;
  std::uint64_t block = 0;
  std::uint64_t duration_ms = 0;
};

bool SendAllBlocking(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) {
      return false;
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool RecvAllBlocking(int fd, char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) {
      return false;
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// Target side of the baseline: one plain blocking socket per run.
void ServeBaseline(int listen_fd, char* region, std::uint64_t region_size) {
  while (true) {
    const int fd = ::accept(listen_fd, nullptr, nullptr);
    if (fd < 0) {
      return;
    }
    BaselineHello h;
    if (RecvAllBlocking(fd, reinterpret_cast<char*>(&h), sizeof(h)) && h.block > 0 &&
        h.block <= region_size) {
      if (h.target_sends != 0) {
        const auto end = Clock::now() + std::chrono::milliseconds(h.duration_ms);
        while (Clock::now() < end && SendAllBlocking(fd, region, h.block)) {
        }
      } else {
        std::uint64_t total = 0;
        while (true) {
          const ssize_t k = ::recv(fd, region + total % h.block, h.block - total % h.block, 0);
          if (k <= 0) {
            break;
          }
          total += static_cast<std::uint64_t>(k);
        }
        SendAllBlocking(fd, reinterpret_cast<char*>(&total), sizeof(total));
      }
    }
    ::close(fd);
  }
}

// Copies block by block over an area as large as the engine's, so source
// and destination see the same footprint (and cache behaviour) as the run.
double MemcpyBaseline(char* src, std::uint64_t block, std::uint64_t area, double seconds) {
  WarmMemory dst(static_cast<std::size_t>(area));
  const std::uint64_t slots = area / block;
  std::uint64_t bytes = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  for (std::uint64_t i = 0; Clock::now() < end; ++i) {
    const std::uint64_t off = (i % slots) * block;
    std::memcpy(dst.data + off, src + off, block);
    bytes += block;
  }
  return static_cast<double>(bytes) / std::chrono::duration<double>(Clock::now() - start).count() /
         1e9;
}

Result<double> SocketBaseline(std::uint16_t port, const TransferBenchOptions& o, char* buf) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return UnavailableError("baseline connect failed", FailureScope::kEndpoint);
  }
  BaselineHello h;
  h.target_sends = o.op == OpKind::kRead ? 1 : 0;
  h.block = o.block_size;
  h.duration_ms = static_cast<std::uint64_t>(o.duration_s * 1000);
  SendAllBlocking(fd, reinterpret_cast<char*>(&h), sizeof(h));
  std::uint64_t bytes = 0;
  const auto start = Clock::now();
  if (o.op == OpKind::kRead) {
    while (true) {
      const ssize_t k =
          ::recv(fd, buf + bytes % o.block_size, o.block_size - bytes % o.block_size, 0);
      if (k <= 0) {
        break;
      }
      bytes += static_cast<std::uint64_t>(k);
    }
  } else {
    const auto end = start + std::chrono::duration<double>(o.duration_s);
    while (Clock::now() < end && SendAllBlocking(fd, buf, o.block_size)) {
    }
    ::shutdown(fd, SHUT_WR);
    RecvAllBlocking(fd, reinterpret_cast<char*>(&bytes), sizeof(bytes));
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  ::close(fd);
  return static_cast<double>(bytes) / secs / 1e9;
}

}  // namespace

Status ValidateOptions(const TransferBenchOptions& o) {
  if (o.transport != "tcp" && o.transport != "shm") {
    return InvalidArgumentError("--transport must be tcp or shm");
  }
  if (o.block_size == 0 || o.block_size > (std::uint64_t{1} << 30)) {
    return InvalidArgumentError("--block-size must be in 1B..1GiB");
  }
  if (o.batch < 1 || o.batch > 4096) {
    return InvalidArgumentError("--batch must be in 1..4096");
  }
  if (o.threads < 1 || o.threads > 256) {
    return InvalidArgumentError("--threads must be in 1..256");
  }
  if (!(o.duration_s > 0 && o.duration_s <= 600)) {
    return InvalidArgumentError("--duration must be in (0, 600] seconds");
  }
  const std::uint64_t area =
      o.block_size * static_cast<std::uint64_t>(o.batch) * static_cast<std::uint64_t>(o.threads);
  if (area > kMaxArea) {
    return InvalidArgumentError("block-size x batch x threads = " + FormatByteSize(area) +
                                " exceeds the " + FormatByteSize(kMaxArea) + " per side limit");
  }
  return Status::Ok();
}

int RunTransferTarget(std::uint64_t region_size, bool shared, int io_threads) {
  EngineConfig config;
  config.io_threads = io_threads;
  auto engine = TransferEngine::Create(config);
  if (!engine.ok()) {
    std::cerr << "target: " << engine.status().ToString() << "\n";
    return 1;
  }
  SharedBuffer shared_buf;
  std::unique_ptr<WarmMemory> plain;
  char* region = nullptr;
  if (shared) {
    auto s = (*engine)->AllocateShared(region_size);
    if (!s.ok()) {
      std::cerr << "target: " << s.status().ToString() << "\n";
      return 1;
    }
    shared_buf = std::move(*s);
    region = static_cast<char*>(shared_buf.data());
  } else {
    plain = std::make_unique<WarmMemory>(region_size);
    region = plain->data;
  }
  auto key =
      (*engine)->RegisterMemory(region, region_size, MemoryKind::kHost, Access::kRemoteReadWrite);
  if (region == nullptr || !key.ok()) {
    std::cerr << "target: cannot register " << region_size << " bytes\n";
    return 1;
  }
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(lfd, 4) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::cerr << "target: baseline listener failed\n";
    return 1;
  }
  std::thread baseline([&] { ServeBaseline(lfd, region, region_size); });
  baseline.detach();
  std::cout << "READY " << (*engine)->endpoint() << " " << key->value << " " << ntohs(addr.sin_port)
            << std::endl;
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  ::shutdown(lfd, SHUT_RDWR);
  std::_Exit(0);  // The baseline thread may still be blocked in accept.
}

Result<TransferBenchResult> RunTransferBench(const TransferBenchOptions& o,
                                             const std::string& self_exe) {
  SLUICE_RETURN_IF_ERROR(ValidateOptions(o));
  const std::uint64_t per_thread = o.block_size * static_cast<std::uint64_t>(o.batch);
  const std::uint64_t area = per_thread * static_cast<std::uint64_t>(o.threads);
  std::vector<std::string> args = {self_exe,
                                   "bench",
                                   "transfer-target",
                                   "--region-size",
                                   std::to_string(area),
                                   "--io-threads",
                                   std::to_string(o.io_threads)};
  if (o.transport == "shm") {
    args.push_back("--shared");
  }
  SLUICE_ASSIGN_OR_RETURN(auto child, BenchChild::Spawn(args));
  const std::string endpoint = child->Word(0);
  const std::uint64_t key = std::stoull(child->Word(1));
  const auto baseline_port = static_cast<std::uint16_t>(std::stoul(child->Word(2)));

  EngineConfig config;
  config.transports = {o.transport};
  config.io_threads = o.io_threads;
  config.connections_per_peer = o.connections;
  config.slice_size = o.slice_size;
  SLUICE_ASSIGN_OR_RETURN(auto engine, TransferEngine::Create(config));
  WarmMemory local(area);
  if (local.data == nullptr) {
    return ResourceExhaustedError("cannot allocate " + FormatByteSize(area) + " of local memory");
  }
  SLUICE_RETURN_IF_ERROR(
      engine->RegisterMemory(local.data, area, MemoryKind::kHost, Access::kLocalOnly).status());
  SLUICE_ASSIGN_OR_RETURN(SegmentId seg, engine->OpenSegment(endpoint));

  TransferBenchResult r;
  r.options = o;
  // The baseline runs half before and half after the engine; the better half
  // counts, so machine noise can only lower the reported ratio.
  auto baseline = [&]() -> Result<double> {
    TransferBenchOptions half = o;
    half.duration_s = o.duration_s / 2;
    if (o.transport == "shm") {
      return MemcpyBaseline(local.data, o.block_size, area, half.duration_s);
    }
    return SocketBaseline(baseline_port, half, local.data);
  };
  SLUICE_ASSIGN_OR_RETURN(const double baseline_before, baseline());

  auto make_ops = [&](int t) {
    std::vector<TransferRequest> ops(static_cast<std::size_t>(o.batch));
    for (int b = 0; b < o.batch; ++b) {
      const std::uint64_t off =
          static_cast<std::uint64_t>(t) * per_thread + static_cast<std::uint64_t>(b) * o.block_size;
      ops[static_cast<std::size_t>(b)] = TransferRequest{
          o.op, local.data + off, seg, RegionKey{key}, off, o.block_size, TransportHint::kAuto};
    }
    return ops;
  };
  // Warm-up: one batch per thread, also a correctness gate.
  for (int t = 0; t < o.threads; ++t) {
    SLUICE_RETURN_IF_ERROR(engine->TransferSync(make_ops(t)).WithContext("warm-up batch"));
  }
  std::atomic<bool> failed{false};
  std::vector<std::vector<double>> lat(static_cast<std::size_t>(o.threads));
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(o.threads), 0);
  Status first_error;
  std::mutex err_mu;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(o.duration_s);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      const auto ops = make_ops(t);
      auto& mine = lat[static_cast<std::size_t>(t)];
      mine.reserve(1 << 16);
      while (!failed.load() && Clock::now() < end) {
        const auto t0 = Clock::now();
        Status s = engine->TransferSync(ops, std::chrono::seconds(60));
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(err_mu);
          first_error = s;
          failed = true;
          return;
        }
        mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        ++counts[static_cast<std::size_t>(t)];
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (failed) {
    return first_error.WithContext("benchmark batch");
  }
  SLUICE_ASSIGN_OR_RETURN(const double baseline_after, baseline());
  r.baseline_gbps = std::max(baseline_before, baseline_after);
  std::vector<double> all;
  for (std::size_t t = 0; t < lat.size(); ++t) {
    all.insert(all.end(), lat[t].begin(), lat[t].end());
    r.batches += counts[t];
  }
  r.bytes = r.batches * per_thread;
  r.gbps = static_cast<double>(r.bytes) / secs / 1e9;
  r.batch_p50_us = Percentile(all, 0.50);
  r.batch_p99_us = Percentile(all, 0.99);
  return r;
}

std::string ToJson(const TransferBenchResult& r) {
  nlohmann::json j;
  j["transport"] = r.options.transport;
  j["op"] = r.options.op == OpKind::kRead ? "read" : "write";
  j["block_size"] = r.options.block_size;
  j["batch"] = r.options.batch;
  j["threads"] = r.options.threads;
  j["duration_s"] = r.options.duration_s;
  j["io_threads"] = r.options.io_threads;
  j["connections"] = r.options.connections;
  j["gbps"] = r.gbps;
  j["baseline_gbps"] = r.baseline_gbps;
  j["ratio"] = r.baseline_gbps > 0 ? r.gbps / r.baseline_gbps : 0.0;
  j["batch_p50_us"] = r.batch_p50_us;
  j["batch_p99_us"] = r.batch_p99_us;
  j["batches"] = r.batches;
  j["bytes"] = r.bytes;
  j["unit"] = "GB/s (1e9 bytes/s)";
  return j.dump();
}

std::string ToText(const TransferBenchResult& r) {
  std::ostringstream s;
  s.precision(3);
  s << r.options.transport << " " << (r.options.op == OpKind::kRead ? "read" : "write") << " "
    << FormatByteSize(r.options.block_size) << " x" << r.options.batch
    << " threads=" << r.options.threads << ": " << r.gbps << " GB/s, baseline " << r.baseline_gbps
    << " GB/s, ratio " << (r.baseline_gbps > 0 ? r.gbps / r.baseline_gbps : 0.0) << ", batch p50 "
    << r.batch_p50_us << " us, p99 " << r.batch_p99_us << " us";
  return s.str();
}

}  // namespace sluice::bench
