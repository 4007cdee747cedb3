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
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "sluice/security.h"
#include "sluice/units.h"

#include "bench/bench_util.h"
#include "bench/socket_baseline.h"
#include "device/backends.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kMaxArea = std::uint64_t{8} << 30;

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
  return SocketBaselineGbps(o.target_address, port, o.op == OpKind::kRead, o.block_size,
                            o.duration_s, buf);
}

bool Involves(const TransferBenchOptions& o, const char* kind) {
  return o.src_kind == kind || o.dst_kind == kind;
}
// The kind of the target's region: the destination of a write, the source
// of a read.
const std::string& RemoteKind(const TransferBenchOptions& o) {
  return o.op == OpKind::kWrite ? o.dst_kind : o.src_kind;
}
const std::string& LocalKind(const TransferBenchOptions& o) {
  return o.op == OpKind::kWrite ? o.src_kind : o.dst_kind;
}

// The device backend's copies from a src-kind to a dst-kind buffer of
// `area` bytes each, in this process: `batch` blocks queued on one stream,
// then one wait, as the engine's devipc runs them.
Result<double> BackendCopyBaseline(const TransferBenchOptions& o, std::uint64_t area,
                                   double seconds) {
  SLUICE_ASSIGN_OR_RETURN(device::DeviceBackend * b, device::ProcessBackend(o.device));
  WarmMemory host_src(o.src_kind == "host" ? area : 0), host_dst(o.dst_kind == "host" ? area : 0);
  DeviceMemory dev_src(o.device, o.src_kind == "device" ? area : 0);
  DeviceMemory dev_dst(o.device, o.dst_kind == "device" ? area : 0);
  SLUICE_RETURN_IF_ERROR(dev_src.error);
  SLUICE_RETURN_IF_ERROR(dev_dst.error);
  char* src = o.src_kind == "host" ? host_src.data : dev_src.data;
  char* dst = o.dst_kind == "host" ? host_dst.data : dev_dst.data;
  SLUICE_ASSIGN_OR_RETURN(device::Stream stream, b->CreateStream(0));
  SLUICE_ASSIGN_OR_RETURN(device::Event event, b->CreateEvent());
  const std::uint64_t slots = area / o.block_size;
  std::uint64_t bytes = 0, slot = 0;
  Status failed;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  do {
    for (int i = 0; i < o.batch && failed.ok(); ++i, ++slot) {
      const std::uint64_t off = (slot % slots) * o.block_size;
      failed = b->CopyAsync(dst + off, src + off, o.block_size, stream);
    }
    if (failed.ok()) {
      failed = b->Record(event, stream);
    }
    if (failed.ok()) {
      failed = b->Wait(event, std::chrono::seconds(60));
    }
    bytes += o.block_size * static_cast<std::uint64_t>(o.batch);
  } while (failed.ok() && Clock::now() < end);
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  (void)b->DestroyEvent(event);
  (void)b->DestroyStream(stream);
  SLUICE_RETURN_IF_ERROR(failed.WithContext("baseline copy"));
  return static_cast<double>(bytes) / secs / 1e9;
}

}  // namespace

Status ValidateOptions(const TransferBenchOptions& o) {
  for (const std::string* kind : {&o.src_kind, &o.dst_kind}) {
    if (*kind != "host" && *kind != "device") {
      return InvalidArgumentError("--src-kind and --dst-kind must be host or device");
    }
  }
  if (o.device != "sim" && o.device != "cuda") {
    return InvalidArgumentError("--device must be sim or cuda");
  }
  SLUICE_RETURN_IF_ERROR(ValidateTargetHost(o.target_netns, o.target_address, o.transport));
  if (o.encrypt_ab && o.transport != "tcp") {
    return InvalidArgumentError(
        "--encrypt-ab needs --transport tcp (same-host transports are not encrypted)");
  }
  if ((o.transport == "shm" || o.transport == "ucx") && Involves(o, "device")) {
    return InvalidArgumentError(o.transport +
                                " moves host memory only: use --transport tcp or devipc");
  }
  if (o.transport == "devipc" && !Involves(o, "device")) {
    return InvalidArgumentError(
        "devipc moves device memory (a peer's device memory, or device memory here to and from "
        "a peer's shared host memory): --src-kind or --dst-kind must be device");
  }
  if (o.transport != "tcp" && o.transport != "shm" && o.transport != "ucx" &&
      o.transport != "devipc") {
    return InvalidArgumentError("--transport must be tcp, shm, ucx or devipc");
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

namespace {

// The engine secret a cluster token file gives (as every role derives it).
Result<std::string> SecretFromToken(const std::string& token_file) {
  SecurityFiles files;
  files.token_file = token_file;
  SLUICE_ASSIGN_OR_RETURN(SecurityConfig sec, LoadSecurity(files));
  return TransferSecret(sec);
}

}  // namespace

int RunTransferTarget(std::uint64_t region_size, bool shared, int io_threads,
                      const std::string& token_file, const std::string& device,
                      const std::string& listen_address, bool encrypt, bool ucx) {
  EngineConfig config;
  config.encrypt_data = encrypt;
  if (ucx) {
    config.transports = {"tcp", "shm", "ucx"};
  }
  config.listen = listen_address + ":0";
  config.io_threads = io_threads;
  config.device = device;
  if (!token_file.empty()) {
    auto secret = SecretFromToken(token_file);
    if (!secret.ok()) {
      std::cerr << "target: " << secret.status().ToString() << "\n";
      return 1;
    }
    config.secret = *secret;
  }
  auto engine = TransferEngine::Create(config);
  if (!engine.ok()) {
    std::cerr << "target: " << engine.status().ToString() << "\n";
    return 1;
  }
  SharedBuffer shared_buf;
  std::unique_ptr<WarmMemory> plain;
  std::unique_ptr<DeviceMemory> dev;
  char* region = nullptr;
  if (!device.empty()) {
    dev = std::make_unique<DeviceMemory>(device, region_size);
    if (dev->data == nullptr) {
      std::cerr << "target: " << dev->error.ToString() << "\n";
      return 1;
    }
    region = dev->data;
  } else if (shared) {
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
  auto key = (*engine)->RegisterMemory(region, region_size,
                                       dev != nullptr ? MemoryKind::kDevice : MemoryKind::kHost,
                                       Access::kRemoteReadWrite);
  if (region == nullptr || !key.ok()) {
    std::cerr << "target: cannot register " << region_size << " bytes\n";
    return 1;
  }
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, listen_address.c_str(), &addr.sin_addr) != 1) {
    std::cerr << "target: --listen-address '" << listen_address << "' is not an IPv4 address\n";
    return 1;
  }
  socklen_t len = sizeof(addr);
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(lfd, 4) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::cerr << "target: baseline listener failed\n";
    return 1;
  }
  std::thread baseline([&] { ServeSocketBaseline(lfd, region, region_size); });
  baseline.detach();
  std::cout << "READY " << (*engine)->endpoint() << " " << key->value << " " << ntohs(addr.sin_port)
            << std::endl;
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  ::shutdown(lfd, SHUT_RDWR);
  std::_Exit(0);  // The baseline thread may still be blocked in accept.
}

namespace {

// One side of the run: a target process and this process's engine to it.
struct TransferSide {
  std::unique_ptr<BenchChild> child;
  std::unique_ptr<TransferEngine> engine;
  SegmentId seg;
  std::uint64_t key = 0;
  std::uint16_t baseline_port = 0;
};

// Starts a target and an engine to it; with `token_file`, both derive the
// engine secret from that cluster token.
Result<TransferSide> StartSide(const TransferBenchOptions& o, const std::string& self_exe,
                               std::uint64_t area, char* local, const std::string& token_file,
                               bool encrypt = false) {
  std::vector<std::string> args = {self_exe,
                                   "bench",
                                   "transfer-target",
                                   "--region-size",
                                   std::to_string(area),
                                   "--io-threads",
                                   std::to_string(o.io_threads),
                                   "--listen-address",
                                   o.target_address};
  // shm maps the target's memory; devipc maps it when it is host memory.
  if (o.transport == "shm" || (o.transport == "devipc" && RemoteKind(o) == "host")) {
    args.push_back("--shared");
  }
  if (RemoteKind(o) == "device") {
    args.insert(args.end(), {"--device", o.device});
  }
  if (o.transport == "ucx") {
    args.push_back("--ucx");
  }
  EngineConfig config;
  if (Involves(o, "device")) {
    config.device = o.device;
    config.device_ipc = o.transport == "devipc";  // Else device memory is staged over tcp.
  }
  if (!token_file.empty()) {
    args.insert(args.end(), {"--cluster-token", token_file});
    SLUICE_ASSIGN_OR_RETURN(config.secret, SecretFromToken(token_file));
  }
  if (encrypt) {
    args.push_back("--encrypt-data");
    config.encrypt_data = true;
  }
  TransferSide side;
  SLUICE_ASSIGN_OR_RETURN(side.child, BenchChild::Spawn(OnTargetHost(o.target_netns, args)));
  side.key = std::stoull(side.child->Word(1));
  side.baseline_port = static_cast<std::uint16_t>(std::stoul(side.child->Word(2)));
  config.transports = {o.transport == "devipc" ? std::string("tcp") : o.transport};
  config.io_threads = o.io_threads;
  config.connections_per_peer = o.connections;
  config.slice_size = o.slice_size;
  SLUICE_ASSIGN_OR_RETURN(side.engine, TransferEngine::Create(config));
  const MemoryKind local_kind = LocalKind(o) == "device" ? MemoryKind::kDevice : MemoryKind::kHost;
  SLUICE_RETURN_IF_ERROR(
      side.engine->RegisterMemory(local, area, local_kind, Access::kLocalOnly).status());
  SLUICE_ASSIGN_OR_RETURN(side.seg, side.engine->OpenSegment(side.child->Word(0)));
  return side;
}

// Batches moved in one measured round, and their latencies.
struct Round {
  std::uint64_t batches = 0;
  double secs = 0;
  std::vector<double> lat_us;
};

// `o.threads` threads submit `o.batch`-op batches to `side` for `seconds`.
Result<Round> MeasureRound(const TransferBenchOptions& o, TransferSide& side, char* local,
                           double seconds) {
  const std::uint64_t per_thread = o.block_size * static_cast<std::uint64_t>(o.batch);
  auto make_ops = [&](int t) {
    std::vector<TransferRequest> ops(static_cast<std::size_t>(o.batch));
    for (int b = 0; b < o.batch; ++b) {
      const std::uint64_t off =
          static_cast<std::uint64_t>(t) * per_thread + static_cast<std::uint64_t>(b) * o.block_size;
      ops[static_cast<std::size_t>(b)] =
          TransferRequest{o.op,         local + off,         side.seg, RegionKey{side.key}, off,
                          o.block_size, TransportHint::kAuto};
    }
    return ops;
  };
  std::atomic<bool> failed{false};
  std::vector<std::vector<double>> lat(static_cast<std::size_t>(o.threads));
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(o.threads), 0);
  Status first_error;
  std::mutex err_mu;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      const auto ops = make_ops(t);
      auto& mine = lat[static_cast<std::size_t>(t)];
      mine.reserve(1 << 16);
      do {  // At least one batch: a zero-length round is a warm-up.
        const auto t0 = Clock::now();
        Status s = side.engine->TransferSync(ops, std::chrono::seconds(60));
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(err_mu);
          first_error = s;
          failed = true;
          return;
        }
        mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        ++counts[static_cast<std::size_t>(t)];
      } while (!failed.load() && Clock::now() < end);
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  Round r;
  r.secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (failed) {
    return first_error.WithContext("benchmark batch");
  }
  for (std::size_t t = 0; t < lat.size(); ++t) {
    r.lat_us.insert(r.lat_us.end(), lat[t].begin(), lat[t].end());
    r.batches += counts[t];
  }
  return r;
}

}  // namespace

Result<TransferBenchResult> RunTransferBench(const TransferBenchOptions& o,
                                             const std::string& self_exe) {
  SLUICE_RETURN_IF_ERROR(ValidateOptions(o));
  const std::uint64_t per_thread = o.block_size * static_cast<std::uint64_t>(o.batch);
  const std::uint64_t area = per_thread * static_cast<std::uint64_t>(o.threads);
  const bool local_device = LocalKind(o) == "device";
  WarmMemory local(local_device ? 0 : area);
  DeviceMemory local_dev(o.device, local_device ? area : 0);
  SLUICE_RETURN_IF_ERROR(local_dev.error);
  char* const local_data = local_device ? local_dev.data : local.data;
  if (local_data == nullptr) {
    return ResourceExhaustedError("cannot allocate " + FormatByteSize(area) + " of local memory");
  }
  // The engine under test (index 0), and with credential_ab the same pair
  // of processes with a cluster credential (index 1).
  std::vector<TransferSide> sides;
  SLUICE_ASSIGN_OR_RETURN(TransferSide open, StartSide(o, self_exe, area, local_data, ""));
  sides.push_back(std::move(open));
  TokenFile token;
  std::string token_path;
  if (o.credential_ab || o.encrypt_ab) {
    SLUICE_ASSIGN_OR_RETURN(token_path, WriteTokenFile(&token));
  }
  int credential_side = -1, encrypted_side = -1;
  if (o.credential_ab) {
    SLUICE_ASSIGN_OR_RETURN(TransferSide closed,
                            StartSide(o, self_exe, area, local_data, token_path));
    credential_side = static_cast<int>(sides.size());
    sides.push_back(std::move(closed));
  }
  if (o.encrypt_ab) {
    SLUICE_ASSIGN_OR_RETURN(TransferSide sealed,
                            StartSide(o, self_exe, area, local_data, token_path, true));
    encrypted_side = static_cast<int>(sides.size());
    sides.push_back(std::move(sealed));
  }

  TransferBenchResult r;
  r.options = o;
  // The baseline runs half before and half after the engine; the better half
  // counts, so machine noise can only lower the reported ratio.
  auto baseline = [&]() -> Result<double> {
    TransferBenchOptions half = o;
    half.duration_s = o.duration_s / 2;
    if (Involves(o, "device")) {
      return BackendCopyBaseline(o, area, half.duration_s);
    }
    if (o.transport == "shm") {
      return MemcpyBaseline(local_data, o.block_size, area, half.duration_s);
    }
    return SocketBaseline(sides[0].baseline_port, half, local_data);
  };
  SLUICE_ASSIGN_OR_RETURN(const double baseline_before, baseline());
  // Warm-up: one batch per thread and side, also a correctness gate.
  for (TransferSide& side : sides) {
    SLUICE_RETURN_IF_ERROR(MeasureRound(o, side, local_data, 0).status().WithContext("warm-up"));
  }
  // With two sides, rounds alternate so that drift on this machine falls on
  // both alike; each side gets o.duration_s in all.
  const int rounds = sides.size() > 1 ? 4 : 1;
  std::vector<Round> total(sides.size());
  for (int i = 0; i < rounds; ++i) {
    for (std::size_t k = 0; k < sides.size(); ++k) {
      SLUICE_ASSIGN_OR_RETURN(Round one,
                              MeasureRound(o, sides[k], local_data, o.duration_s / rounds));
      total[k].batches += one.batches;
      total[k].secs += one.secs;
      total[k].lat_us.insert(total[k].lat_us.end(), one.lat_us.begin(), one.lat_us.end());
    }
  }
  SLUICE_ASSIGN_OR_RETURN(const double baseline_after, baseline());
  r.baseline_gbps = std::max(baseline_before, baseline_after);
  r.batches = total[0].batches;
  r.bytes = r.batches * per_thread;
  r.gbps = static_cast<double>(r.bytes) / total[0].secs / 1e9;
  r.batch_p50_us = Percentile(total[0].lat_us, 0.50);
  r.batch_p99_us = Percentile(total[0].lat_us, 0.99);
  r.transports = sides[0].engine->TransportCounters();
  auto gbps = [&](const Round& t) {
    return static_cast<double>(t.batches * per_thread) / t.secs / 1e9;
  };
  if (credential_side > 0) {
    Round& t = total[static_cast<std::size_t>(credential_side)];
    r.credential_gbps = gbps(t);
    r.credential_p50_us = Percentile(t.lat_us, 0.50);
    r.credential_p99_us = Percentile(t.lat_us, 0.99);
  }
  if (encrypted_side > 0) {
    Round& t = total[static_cast<std::size_t>(encrypted_side)];
    r.encrypted_gbps = gbps(t);
    r.encrypted_p50_us = Percentile(t.lat_us, 0.50);
    r.encrypted_p99_us = Percentile(t.lat_us, 0.99);
  }
  return r;
}

std::string ToJson(const TransferBenchResult& r) {
  nlohmann::json j;
  j["transport"] = r.options.transport;
  if (!r.options.target_netns.empty()) {
    j["target_netns"] = r.options.target_netns;
    j["target_address"] = r.options.target_address;
  }
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
  if (r.options.credential_ab) {
    j["credential_gbps"] = r.credential_gbps;
    j["credential_ratio"] = r.gbps > 0 ? r.credential_gbps / r.gbps : 0.0;
    j["credential_batch_p50_us"] = r.credential_p50_us;
    j["credential_batch_p99_us"] = r.credential_p99_us;
  }
  if (r.options.encrypt_ab) {
    j["encrypted_gbps"] = r.encrypted_gbps;
    j["encrypted_ratio"] = r.gbps > 0 ? r.encrypted_gbps / r.gbps : 0.0;
    j["encrypted_batch_p50_us"] = r.encrypted_p50_us;
    j["encrypted_batch_p99_us"] = r.encrypted_p99_us;
  }
  j["src_kind"] = r.options.src_kind;
  j["dst_kind"] = r.options.dst_kind;
  if (Involves(r.options, "device")) {
    j["device"] = r.options.device;
  }
  for (const TransportStats& t : r.transports) {
    j["bytes_by_transport"][t.name] = t.bytes_read + t.bytes_written;
  }
  j["unit"] = "GB/s (1e9 bytes/s)";
  return j.dump();
}

std::string ToText(const TransferBenchResult& r) {
  std::ostringstream s;
  s.precision(3);
  s << (Involves(r.options, "device")
            ? r.options.src_kind + "->" + r.options.dst_kind + " (" + r.options.device + ") "
            : std::string())
    << r.options.transport << " " << (r.options.op == OpKind::kRead ? "read" : "write") << " "
    << FormatByteSize(r.options.block_size) << " x" << r.options.batch
    << " threads=" << r.options.threads << ": " << r.gbps << " GB/s, baseline " << r.baseline_gbps
    << " GB/s, ratio " << (r.baseline_gbps > 0 ? r.gbps / r.baseline_gbps : 0.0) << ", batch p50 "
    << r.batch_p50_us << " us, p99 " << r.batch_p99_us << " us";
  if (r.options.credential_ab) {
    s << "; with the credential " << r.credential_gbps << " GB/s (x"
      << (r.gbps > 0 ? r.credential_gbps / r.gbps : 0.0) << "), batch p50 " << r.credential_p50_us
      << " us, p99 " << r.credential_p99_us << " us";
  }
  if (r.options.encrypt_ab) {
    s << "; encrypted " << r.encrypted_gbps << " GB/s (x"
      << (r.gbps > 0 ? r.encrypted_gbps / r.gbps : 0.0) << "), batch p50 " << r.encrypted_p50_us
      << " us, p99 " << r.encrypted_p99_us << " us";
  }
  return s.str();
}

}  // namespace sluice::bench
