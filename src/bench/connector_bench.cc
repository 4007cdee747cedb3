#include "bench/connector_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "sluice/connector/connector.h"
#include "sluice/security.h"
#include "sluice/units.h"

#include "bench/bench_util.h"
#include "common/work_schedule.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

struct Samples {
  std::vector<double> total_us;
  std::vector<double> ttfc_us;
  double seconds = 0;
};

// A producer and a consumer connector (and in store mode the master and
// node they use), all with or without a cluster credential.
struct World {
  std::unique_ptr<BenchChild> master, node;
  std::unique_ptr<DiffusionConnector> producer, consumer;
  SharedTensor shared_src;  // With shared_tensors.
};

Result<World> StartWorld(const ConnectorBenchOptions& o, const std::string& exe, std::uint64_t mem,
                         const std::string& token_file) {
  const bool store = o.mode == "store";
  World w;
  std::vector<std::string> token_args;
  SecurityConfig security;
  if (!token_file.empty()) {
    token_args = {"--cluster-token", token_file};
    SecurityFiles files;
    files.token_file = token_file;
    SLUICE_ASSIGN_OR_RETURN(security, LoadSecurity(files));
  }
  if (store) {
    std::vector<std::string> m = {exe, "master", "--listen", "127.0.0.1:0", "--exit-on-stdin-eof"};
    m.insert(m.end(), token_args.begin(), token_args.end());
    SLUICE_ASSIGN_OR_RETURN(w.master, BenchChild::Spawn(m));
    std::vector<std::string> n = {
        exe,        "store-node",        "--master",           w.master->Word(1),
        "--memory", std::to_string(mem), "--exit-on-stdin-eof"};
    n.insert(n.end(), token_args.begin(), token_args.end());
    SLUICE_ASSIGN_OR_RETURN(w.node, BenchChild::Spawn(n));
  }
  auto make = [&](const char* role) {
    ConnectorConfig c;
    c.role = role;
    c.mode = store ? TransferMode::kStore : TransferMode::kP2p;
    c.engine.transports = {o.transport};
    if (o.device != "cpu") {
      c.engine.device = o.device;
    }
    c.security = security;
    if (store) {
      c.store.master = w.master->Word(1);
    }
    return DiffusionConnector::Create(c);
  };
  SLUICE_ASSIGN_OR_RETURN(w.producer, make("denoise"));
  SLUICE_ASSIGN_OR_RETURN(w.consumer, make("decode"));
  return w;
}

}  // namespace

Status ValidateConnectorOptions(const ConnectorBenchOptions& o) {
  if (o.mode != "p2p" && o.mode != "store") {
    return InvalidArgumentError("--mode must be p2p or store");
  }
  if (o.transport != "shm" && o.transport != "tcp") {
    return InvalidArgumentError("--transport must be shm or tcp");
  }
  SLUICE_RETURN_IF_ERROR(ParseDType(o.dtype).status().WithContext("--dtype"));
  TensorView t{nullptr, *ParseDType(o.dtype), o.shape, {}};
  if (t.shape.empty() || t.shape.size() > 8 || t.nbytes() == 0 ||
      t.nbytes() > (std::uint64_t{1} << 30)) {
    return InvalidArgumentError("--shape must have rank 1..8 and 1 B..1 GiB of data");
  }
  if (o.chunks < 1 ||
      (o.chunks > 1 && (o.chunk_dim < 0 || o.chunk_dim >= static_cast<int>(o.shape.size()) ||
                        o.chunks > o.shape[static_cast<std::size_t>(o.chunk_dim)]))) {
    return InvalidArgumentError("--chunks must be in 1..shape[--chunk-dim]");
  }
  if (o.in_place && (o.chunks != 1 || (o.mode == "p2p" && !o.shared_tensors))) {
    return InvalidArgumentError("--in-place needs --chunks 1 (and --shared-tensors in p2p mode)");
  }
  if (o.device != "cpu" && o.device != "sim" && o.device != "cuda") {
    return InvalidArgumentError("--device must be cpu, sim or cuda");
  }
  if (o.device != "cpu" && (o.shared_tensors || o.in_place)) {
    return InvalidArgumentError(
        "--shared-tensors and --in-place are for host memory (--device cpu)");
  }
  if (o.chunk_work_us < 0 || o.chunk_work_us > 1000000) {
    return InvalidArgumentError("--chunk-work-us must be in 0..1000000");
  }
  if (o.produce_us < 0 || o.produce_us > 1000000) {
    return InvalidArgumentError("--produce-us must be in 0..1000000");
  }
  if ((o.overlap || o.produce_us > 0) &&
      (!o.overlap || o.chunks < 2 || o.chunk_work_us < 1 || o.in_place)) {
    return InvalidArgumentError(
        "--overlap (and --produce-us) need --chunks > 1 and --chunk-work-us > 0, not --in-place");
  }
  if (!(o.duration_s > 0 && o.duration_s <= 600)) {
    return InvalidArgumentError("--duration must be in (0, 600] seconds");
  }
  return Status::Ok();
}

Result<ConnectorBenchResult> RunConnectorBench(const ConnectorBenchOptions& o,
                                               const std::string& exe) {
  SLUICE_RETURN_IF_ERROR(ValidateConnectorOptions(o));
  const DType dtype = *ParseDType(o.dtype);
  const TensorView shape_only{nullptr, dtype, o.shape, {}};
  const std::uint64_t bytes = shape_only.nbytes();
  const bool store = o.mode == "store";

  const std::uint64_t mem = std::max<std::uint64_t>(bytes * 4, std::uint64_t{256} << 20);
  // The connectors under test (index 0), and with credential_ab the same
  // pair (and store) with a cluster credential (index 1).
  std::vector<World> worlds;
  SLUICE_ASSIGN_OR_RETURN(World open, StartWorld(o, exe, mem, ""));
  worlds.push_back(std::move(open));
  TokenFile token;
  if (o.credential_ab) {
    SLUICE_ASSIGN_OR_RETURN(std::string path, WriteTokenFile(&token));
    SLUICE_ASSIGN_OR_RETURN(World closed, StartWorld(o, exe, mem, path));
    worlds.push_back(std::move(closed));
  }
  // In store mode the raw target has the store node's footprint and raw
  // round trips cycle over it, as payloads cycle through the node's memory:
  // both paths then see the same cache behaviour (a payload-sized target
  // would stay in the CPU cache, which no store holding several payloads
  // does).
  const std::uint64_t raw_slots = store ? mem / bytes : 1;
  std::vector<std::string> raw_args = {exe, "bench", "transfer-target", "--region-size",
                                       std::to_string(raw_slots * bytes)};
  if (o.transport == "shm") {
    raw_args.push_back("--shared");
  }
  SLUICE_ASSIGN_OR_RETURN(auto raw_target, BenchChild::Spawn(raw_args));

  // Host tensors, or with a device both on device 0 (filled from the host).
  const bool on_device = o.device != "cpu";
  WarmMemory plain_src(o.shared_tensors || on_device ? 0 : bytes), host_dst(on_device ? 0 : bytes);
  DeviceMemory dev_src(o.device, on_device ? bytes : 0), dev_dst(o.device, on_device ? bytes : 0);
  SLUICE_RETURN_IF_ERROR(dev_src.error.WithContext("--device " + o.device));
  SLUICE_RETURN_IF_ERROR(dev_dst.error.WithContext("--device " + o.device));
  auto src_of = [&](World& w) {
    return on_device          ? dev_src.data
           : o.shared_tensors ? static_cast<char*>(w.shared_src.data())
                              : plain_src.data;
  };
  char* const dst_data = on_device ? dev_dst.data : host_dst.data;
  auto view_of = [&](char* data) {
    return TensorView{data,
                      dtype,
                      o.shape,
                      {},
                      on_device ? MemoryKind::kDevice : MemoryKind::kHost,
                      on_device ? 0 : -1};
  };
  std::vector<char> pattern(bytes);
  for (std::uint64_t i = 0; i < bytes; ++i) {
    pattern[i] = static_cast<char>(i * 131);
  }
  for (World& w : worlds) {
    if (o.shared_tensors) {
      SLUICE_ASSIGN_OR_RETURN(w.shared_src, w.producer->AllocateTensor(dtype, o.shape));
    }
    char* src = src_of(w);
    if (src == nullptr || dst_data == nullptr) {
      return ResourceExhaustedError("cannot allocate 2 x " + FormatByteSize(bytes));
    }
    if (on_device) {
      SLUICE_RETURN_IF_ERROR(dev_src.CopyIn(pattern.data(), bytes));
    } else {
      std::memcpy(src, pattern.data(), bytes);
    }
  }
  DiffusionConnector* const producer = worlds[0].producer.get();
  DiffusionConnector* const consumer = worlds[0].consumer.get();
  char* const src = src_of(worlds[0]);

  std::uint64_t iteration = 0;
  // One payload: publish, consume every chunk (working on each), release.
  auto connector_op = [&](World& w, int chunks, double* ttfc_us, double* total_us) -> Status {
    DiffusionConnector* const producer = w.producer.get();
    DiffusionConnector* const consumer = w.consumer.get();
    const auto start = Clock::now();
    StagePayload p;
    p.request_id = "bench-" + std::to_string(iteration++);
    p.tensor = view_of(src_of(w));
    p.chunk_dim = chunks > 1 ? o.chunk_dim : -1;
    p.num_chunks = chunks;
    SLUICE_ASSIGN_OR_RETURN(auto h, producer->Publish(p));
    const PayloadDescriptor d = h->descriptor();
    auto work = [&] {
      if (o.chunk_work_us > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(o.chunk_work_us));
      }
    };
    if (o.in_place) {
      // The view (and in store mode its read lease) ends with this block.
      SLUICE_ASSIGN_OR_RETURN(PayloadView v, consumer->ConsumeInPlace(d));
      *ttfc_us = Us(Clock::now() - start);
      work();
    } else {
      SLUICE_ASSIGN_OR_RETURN(auto stream, consumer->Consume(d, view_of(dst_data)));
      bool first = true;
      while (true) {
        SLUICE_ASSIGN_OR_RETURN(auto c, stream->Next());
        if (!c.has_value()) {
          break;
        }
        if (first) {
          *ttfc_us = Us(Clock::now() - start);
          first = false;
        }
        work();
      }
    }
    SLUICE_RETURN_IF_ERROR(consumer->Release(d));
    *total_us = Us(Clock::now() - start);
    // Outside the timed part: the producer sees the release (p2p) or its
    // puts' completion (store) asynchronously.
    SLUICE_RETURN_IF_ERROR(h->Wait(std::chrono::seconds(60)));
    return h->WaitReleased(std::chrono::seconds(60));
  };

  // Benchmark (b): one payload handed over progressively (chunk i ready
  // produce_us after chunk i-1, worked on as it lands), or serially (whole
  // after the tail, worked on whole once landed). The same bytes and work.
  auto handoff_op = [&](bool progressive, double* total_us) -> Status {
    const auto start = Clock::now();
    const auto chunk_ready = [&](int i) {
      return start + std::chrono::microseconds(static_cast<std::int64_t>(o.produce_us) * (i + 1));
    };
    if (!progressive) {
      std::this_thread::sleep_until(chunk_ready(o.chunks - 1));
    }
    StagePayload p;
    p.request_id = "bench-" + std::to_string(iteration++);
    p.tensor = view_of(src);
    p.chunk_dim = progressive ? o.chunk_dim : -1;
    p.num_chunks = progressive ? o.chunks : 1;
    p.progressive = progressive;
    SLUICE_ASSIGN_OR_RETURN(auto h, producer->Publish(p));
    // The producer's tail: its own thread, as a denoise worker's would be.
    Status marked;
    std::thread tail;
    if (progressive) {
      tail = std::thread([&] {
        for (int i = 0; i < o.chunks && marked.ok(); ++i) {
          std::this_thread::sleep_until(chunk_ready(i));
          marked = h->MarkReady(i);
        }
      });
    }
    // The consumer's work as a device would do it: chunk i's starts once it
    // landed and chunk i-1's is done.
    Status s = [&]() -> Status {
      SLUICE_ASSIGN_OR_RETURN(auto stream, consumer->Consume(h->descriptor(), view_of(dst_data)));
      internal::WorkSchedule work;
      while (true) {
        work.Asking();
        SLUICE_ASSIGN_OR_RETURN(auto c, stream->Next());
        if (!c.has_value()) {
          return Status::Ok();
        }
        work.Work(std::chrono::microseconds(o.chunk_work_us * (progressive ? 1 : o.chunks)));
      }
    }();
    if (tail.joinable()) {
      tail.join();
    }
    SLUICE_RETURN_IF_ERROR(marked);
    SLUICE_RETURN_IF_ERROR(s);
    SLUICE_RETURN_IF_ERROR(consumer->Release(h->descriptor()));
    *total_us = Us(Clock::now() - start);
    SLUICE_RETURN_IF_ERROR(h->Wait(std::chrono::seconds(60)));
    return h->WaitReleased(std::chrono::seconds(60));
  };

  // Raw: the same bytes as plain engine batches.
  double ignored = 0;
  for (World& w : worlds) {
    SLUICE_RETURN_IF_ERROR(connector_op(w, 1, &ignored, &ignored));  // Registers both tensors.
  }
  if (o.in_place) {  // Consume never ran: the raw reads need dst registered.
    SLUICE_RETURN_IF_ERROR(
        consumer->engine()
            .RegisterMemory(dst_data, bytes, MemoryKind::kHost, Access::kLocalOnly)
            .status());
  }
  SLUICE_ASSIGN_OR_RETURN(SegmentId raw_seg, producer->engine().OpenSegment(raw_target->Word(0)));
  const RegionKey raw_key{std::stoull(raw_target->Word(1))};
  std::optional<PayloadDescriptor> p2p_desc;
  if (!store) {
    StagePayload p;
    p.request_id = "bench-raw";
    p.tensor = view_of(src);
    SLUICE_ASSIGN_OR_RETURN(auto h, producer->Publish(p));
    p2p_desc = h->descriptor();
    SLUICE_RETURN_IF_ERROR(consumer->Release(*p2p_desc));
  }
  SegmentId p2p_seg;
  if (!store) {
    SLUICE_ASSIGN_OR_RETURN(p2p_seg, consumer->engine().OpenSegment(p2p_desc->producer_endpoint));
  }
  std::uint64_t raw_slot = 0;
  auto raw_op = [&]() -> Status {
    if (store) {
      const std::uint64_t at = (raw_slot++ % raw_slots) * bytes;
      TransferRequest w{OpKind::kWrite, src, raw_seg, raw_key, at, bytes, TransportHint::kAuto};
      SLUICE_RETURN_IF_ERROR(producer->engine().TransferSync({&w, 1}));
      SLUICE_ASSIGN_OR_RETURN(SegmentId back, consumer->engine().OpenSegment(raw_target->Word(0)));
      TransferRequest r{OpKind::kRead, dst_data, back, raw_key, at, bytes, TransportHint::kAuto};
      return consumer->engine().TransferSync({&r, 1});
    }
    TransferRequest r{OpKind::kRead,
                      dst_data,
                      p2p_seg,
                      RegionKey{p2p_desc->region_key},
                      p2p_desc->region_offset,
                      bytes,
                      TransportHint::kAuto};
    return consumer->engine().TransferSync({&r, 1});
  };

  // Alternate short rounds so both sides see the same noise.
  const int rounds = std::max(2, static_cast<int>(o.duration_s / 0.5));
  const double slice = o.duration_s / rounds / (o.chunks > 1 ? 1.5 : 1.0);
  Samples conn, raw, whole, credential, serial, progressive;
  auto run = [&](Samples& into, double seconds, auto op) -> Status {
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    do {
      double ttfc = 0, total = 0;
      SLUICE_RETURN_IF_ERROR(op(&ttfc, &total));
      into.total_us.push_back(total);
      into.ttfc_us.push_back(ttfc);
      into.seconds += total / 1e6;
    } while (Clock::now() < end);
    return Status::Ok();
  };
  auto credential_round = [&]() -> Status {
    if (worlds.size() < 2) {
      return Status::Ok();
    }
    return run(credential, slice, [&](double* t, double* total) {
      return connector_op(worlds[1], o.chunks, t, total);
    });
  };
  for (int i = 0; i < rounds; ++i) {
    // The credentialed pair goes first in every other round, so neither
    // pair always follows the raw batches (which leave the caches cold).
    if (i % 2 == 1) {
      SLUICE_RETURN_IF_ERROR(credential_round());
    }
    SLUICE_RETURN_IF_ERROR(run(raw, slice, [&](double*, double* total) {
      const auto t0 = Clock::now();
      Status s = raw_op();
      *total = Us(Clock::now() - t0);
      return s;
    }));
    SLUICE_RETURN_IF_ERROR(run(conn, slice, [&](double* t, double* total) {
      return connector_op(worlds[0], o.chunks, t, total);
    }));
    if (o.chunks > 1) {
      SLUICE_RETURN_IF_ERROR(run(whole, slice / 2, [&](double* t, double* total) {
        return connector_op(worlds[0], 1, t, total);
      }));
    }
    if (i % 2 == 0) {
      SLUICE_RETURN_IF_ERROR(credential_round());
    }
    if (o.overlap) {  // Alternating within the round: the same noise.
      for (bool p : {i % 2 == 0, i % 2 != 0}) {
        SLUICE_RETURN_IF_ERROR(run(p ? progressive : serial, slice / 2,
                                   [&](double*, double* t) { return handoff_op(p, t); }));
      }
    }
  }
  ConnectorBenchResult r;
  r.options = o;
  r.payload_bytes = bytes;
  r.iterations = conn.total_us.size();
  r.gbps = static_cast<double>(conn.total_us.size() * bytes) / conn.seconds / 1e9;
  r.raw_gbps = static_cast<double>(raw.total_us.size() * bytes) / raw.seconds / 1e9;
  r.overhead_ratio = r.raw_gbps > 0 ? r.gbps / r.raw_gbps : 0;
  r.p50_us = Percentile(conn.total_us, 0.5);
  r.p99_us = Percentile(conn.total_us, 0.99);
  r.raw_p50_us = Percentile(raw.total_us, 0.5);
  r.ttfc_us = Percentile(conn.ttfc_us, 0.5);
  r.ttfc_whole_us = o.chunks > 1 ? Percentile(whole.ttfc_us, 0.5) : r.ttfc_us;
  r.total_whole_us = o.chunks > 1 ? Percentile(whole.total_us, 0.5) : r.p50_us;
  r.bytes_copied_outside_transfers =
      producer->bytes_copied_outside_transfers() + consumer->bytes_copied_outside_transfers();
  if (o.overlap) {
    r.serial_us = Percentile(serial.total_us, 0.5);
    r.progressive_us = Percentile(progressive.total_us, 0.5);
    r.work_us = static_cast<double>(o.chunks) * o.chunk_work_us;
    r.hidden_us = r.serial_us - r.progressive_us;
    r.hidden_share = r.hidden_us / r.work_us;
    const double hideable = std::min(r.work_us, r.serial_us - r.work_us);
    r.overlap_efficiency = hideable > 0 ? r.hidden_us / hideable : 0;
  }
  if (worlds.size() > 1) {
    r.credential_gbps =
        static_cast<double>(credential.total_us.size() * bytes) / credential.seconds / 1e9;
    r.credential_p50_us = Percentile(credential.total_us, 0.5);
    r.credential_p99_us = Percentile(credential.total_us, 0.99);
  }
  return r;
}

std::string ToJson(const ConnectorBenchResult& r) {
  nlohmann::json j;
  j["mode"] = r.options.mode;
  j["transport"] = r.options.transport;
  j["shape"] = r.options.shape;
  j["dtype"] = r.options.dtype;
  j["chunks"] = r.options.chunks;
  j["chunk_dim"] = r.options.chunk_dim;
  j["chunk_work_us"] = r.options.chunk_work_us;
  j["shared_tensors"] = r.options.shared_tensors;
  j["in_place"] = r.options.in_place;
  j["device"] = r.options.device;
  j["payload_bytes"] = r.payload_bytes;
  j["iterations"] = r.iterations;
  j["gbps"] = r.gbps;
  j["raw_gbps"] = r.raw_gbps;
  j["overhead_ratio"] = r.overhead_ratio;
  j["p50_us"] = r.p50_us;
  j["p99_us"] = r.p99_us;
  j["raw_p50_us"] = r.raw_p50_us;
  j["ttfc_us"] = r.ttfc_us;
  j["ttfc_whole_us"] = r.ttfc_whole_us;
  j["total_whole_us"] = r.total_whole_us;
  j["ttfc_ratio"] = r.ttfc_whole_us > 0 ? r.ttfc_us / r.ttfc_whole_us : 0.0;
  j["bytes_copied_outside_transfers"] = r.bytes_copied_outside_transfers;
  if (r.options.overlap) {
    j["produce_us"] = r.options.produce_us;
    j["serial_us"] = r.serial_us;
    j["progressive_us"] = r.progressive_us;
    j["work_us"] = r.work_us;
    j["hidden_us"] = r.hidden_us;
    j["hidden_share"] = r.hidden_share;
    j["overlap_efficiency"] = r.overlap_efficiency;
  }
  if (r.options.credential_ab) {
    j["credential_gbps"] = r.credential_gbps;
    j["credential_ratio"] = r.gbps > 0 ? r.credential_gbps / r.gbps : 0.0;
    j["credential_p50_us"] = r.credential_p50_us;
    j["credential_p99_us"] = r.credential_p99_us;
  }
  j["unit"] = "GB/s (1e9 bytes/s)";
  return j.dump();
}

}  // namespace sluice::bench
