#include "bench/store_bench.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "sluice/security.h"
#include "sluice/store/client.h"
#include "sluice/transfer/engine.h"
#include "sluice/units.h"

#include "bench/bench_util.h"
#include "bench/socket_baseline.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Timed {
  std::uint64_t ops = 0;
  double seconds = 0;
  std::vector<double> latencies_us;
  Status error;
};

// Runs `op(client, iteration)` on `clients` threads for `seconds`.
template <typename Op>
Timed RunFor(int clients, double seconds, Op op) {
  Timed t;
  std::mutex mu;
  std::atomic<bool> failed{false};
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      std::vector<double> lat;
      std::uint64_t n = 0;
      for (std::uint64_t i = 0; !failed && Clock::now() < end; ++i) {
        const auto t0 = Clock::now();
        Status s = op(c, i);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          t.error = s;
          failed = true;
          break;
        }
        lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        ++n;
      }
      std::lock_guard<std::mutex> lock(mu);
      t.ops += n;
      t.latencies_us.insert(t.latencies_us.end(), lat.begin(), lat.end());
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return t;
}

}  // namespace

Status ValidateStoreOptions(const StoreBenchOptions& o) {
  if (o.op != "put" && o.op != "get") {
    return InvalidArgumentError("--op must be put or get");
  }
  if (o.transport != "tcp" && o.transport != "shm" && o.transport != "ucx") {
    return InvalidArgumentError("--transport must be tcp, shm or ucx");
  }
  if (o.value_size == 0 || o.value_size > (std::uint64_t{256} << 20)) {
    return InvalidArgumentError("--value-size must be in 1B..256MiB");
  }
  if (o.clients < 1 || o.clients > 64) {
    return InvalidArgumentError("--clients must be in 1..64");
  }
  if (!(o.duration_s > 0 && o.duration_s <= 600)) {
    return InvalidArgumentError("--duration must be in (0, 600] seconds");
  }
  return ValidateTargetHost(o.target_netns, o.target_address, o.transport);
}

namespace {

// A master and a store node as helper processes, and a client of them in
// this process with its own engine over `local`.
struct StoreUnderTest {
  std::unique_ptr<BenchChild> master, node;
  std::unique_ptr<TransferEngine> engine;
  std::unique_ptr<StoreClient> client;
};

Result<StoreUnderTest> StartStore(const StoreBenchOptions& o, const std::string& exe,
                                  std::uint64_t node_memory, const WarmMemory& local,
                                  const std::string& token_file, bool durable_commits) {
  const std::string& transport = o.transport;
  const std::string listen = o.target_address + ":0";
  StoreUnderTest s;
  // Without a token the cluster is open: said so explicitly, as roles
  // listening beyond loopback require.
  std::vector<std::string> auth = {"--insecure"};
  SecurityConfig security;
  if (!token_file.empty()) {
    auth = {"--cluster-token", token_file};
    SecurityFiles f;
    f.token_file = token_file;
    SLUICE_ASSIGN_OR_RETURN(security, LoadSecurity(f));
  }
  std::vector<std::string> margs = {exe, "master", "--listen", listen, "--exit-on-stdin-eof"};
  margs.insert(margs.end(), auth.begin(), auth.end());
  if (durable_commits) {
    margs.push_back("--durable-commits");
  }
  SLUICE_ASSIGN_OR_RETURN(s.master, BenchChild::Spawn(OnTargetHost(o.target_netns, margs)));
  const std::string master_ep = s.master->Word(1);
  std::vector<std::string> nargs = {exe,
                                    "store-node",
                                    "--master",
                                    master_ep,
                                    "--listen",
                                    listen,
                                    "--memory",
                                    std::to_string(node_memory),
                                    "--exit-on-stdin-eof"};
  nargs.insert(nargs.end(), auth.begin(), auth.end());
  if (transport == "ucx") {
    nargs.insert(nargs.end(), {"--transports", "tcp,shm,ucx"});
  }
  SLUICE_ASSIGN_OR_RETURN(s.node, BenchChild::Spawn(OnTargetHost(o.target_netns, nargs)));
  EngineConfig ec;
  ec.transports = {transport};
  ec.secret = TransferSecret(security);
  SLUICE_ASSIGN_OR_RETURN(s.engine, TransferEngine::Create(ec));
  SLUICE_RETURN_IF_ERROR(
      s.engine->RegisterMemory(local.data, local.size, MemoryKind::kHost, Access::kLocalOnly)
          .status());
  StoreClientConfig cc;
  cc.master = master_ep;
  cc.staging_bytes = 4096;
  cc.security = security;
  SLUICE_ASSIGN_OR_RETURN(s.client, StoreClient::Create(s.engine.get(), cc));
  // The node registers asynchronously: wait until a put goes through.
  const auto ready_by = Clock::now() + std::chrono::seconds(10);
  Status probe;
  do {
    probe = s.client->PutFrom("bench/probe", local.data, 1);
    if (!probe.ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } while (!probe.ok() && Clock::now() < ready_by);
  SLUICE_RETURN_IF_ERROR(probe.WithContext("store did not come up"));
  SLUICE_RETURN_IF_ERROR(s.client->Remove("bench/probe"));
  return s;
}

}  // namespace

Result<StoreBenchResult> RunStoreBench(const StoreBenchOptions& o, const std::string& exe) {
  SLUICE_RETURN_IF_ERROR(ValidateStoreOptions(o));
  const std::uint64_t per_client = o.value_size;
  const std::uint64_t area = per_client * static_cast<std::uint64_t>(o.clients);
  // Room for a few values per client (and more than a CPU cache): puts keep
  // evicting the oldest.
  const std::uint64_t node_memory = std::max<std::uint64_t>(area * 4, std::uint64_t{512} << 20);
  WarmMemory local(area);
  if (local.data == nullptr) {
    return ResourceExhaustedError("cannot allocate " + FormatByteSize(area));
  }
  // The store under test (index 0), and with credential_ab the same store
  // with a cluster credential, with durable_ab one with durable commits
  // (their indexes in `credential_at` and `durable_at`).
  std::vector<StoreUnderTest> stores;
  SLUICE_ASSIGN_OR_RETURN(StoreUnderTest open, StartStore(o, exe, node_memory, local, "", false));
  stores.push_back(std::move(open));
  TokenFile token;
  std::size_t credential_at = 0, durable_at = 0;
  if (o.credential_ab) {
    SLUICE_ASSIGN_OR_RETURN(std::string path, WriteTokenFile(&token));
    SLUICE_ASSIGN_OR_RETURN(StoreUnderTest closed,
                            StartStore(o, exe, node_memory, local, path, false));
    credential_at = stores.size();
    stores.push_back(std::move(closed));
  }
  if (o.durable_ab) {
    SLUICE_ASSIGN_OR_RETURN(StoreUnderTest durable,
                            StartStore(o, exe, node_memory, local, "", true));
    durable_at = stores.size();
    stores.push_back(std::move(durable));
  }
  // The raw target has the node's footprint, and raw puts cycle over it as
  // store puts do, so both see the same cache behaviour.
  std::vector<std::string> raw_args = {exe,
                                       "bench",
                                       "transfer-target",
                                       "--region-size",
                                       std::to_string(node_memory),
                                       "--listen-address",
                                       o.target_address};
  if (o.transport == "shm") {
    raw_args.push_back("--shared");
  }
  if (o.transport == "ucx") {
    raw_args.push_back("--ucx");
  }
  SLUICE_ASSIGN_OR_RETURN(auto raw, BenchChild::Spawn(OnTargetHost(o.target_netns, raw_args)));
  TransferEngine* engine = stores[0].engine.get();
  SLUICE_ASSIGN_OR_RETURN(SegmentId raw_seg, engine->OpenSegment(raw->Word(0)));
  const RegionKey raw_key{std::stoull(raw->Word(1))};

  const bool put = o.op == "put";
  if (!put) {
    for (StoreUnderTest& st : stores) {
      for (int c = 0; c < o.clients; ++c) {
        SLUICE_RETURN_IF_ERROR(st.client->PutFrom("bench/get/" + std::to_string(c),
                                                  local.data + c * per_client, per_client));
      }
    }
  }
  const std::uint64_t slots = node_memory / per_client;
  // Per-client op counters that run on across rounds (each client thread
  // touches only its own entry): keys stay unique, raw writes keep cycling.
  std::vector<std::uint64_t> raw_next(o.clients, 0), store_next(o.clients, 0);
  auto raw_op = [&](int c, std::uint64_t) {
    const std::uint64_t i = raw_next[c]++;
    const std::uint64_t slot =
        put ? (static_cast<std::uint64_t>(c) + i * static_cast<std::uint64_t>(o.clients)) % slots
            : static_cast<std::uint64_t>(c);
    TransferRequest r{put ? OpKind::kWrite : OpKind::kRead,
                      local.data + c * per_client,
                      raw_seg,
                      raw_key,
                      slot * per_client,
                      per_client,
                      TransportHint::kAuto};
    return engine->TransferSync({&r, 1});
  };
  auto store_op = [&](StoreClient* client) {
    return [&, client](int c, std::uint64_t) -> Status {
      const std::uint64_t i = store_next[c]++;
      char* buf = local.data + c * per_client;
      if (put) {
        return client->PutFrom("bench/put/" + std::to_string(c) + "/" + std::to_string(i), buf,
                               per_client);
      }
      return client->GetInto("bench/get/" + std::to_string(c), buf, per_client).status();
    };
  };
  // Raw engine and store runs alternate in short rounds, so both see the
  // same noise from a shared host (a paired comparison, not one sample each).
  const int rounds = std::max(2, static_cast<int>(o.duration_s / 0.5));
  const double slice = o.duration_s / rounds;
  Timed raw_total;
  double socket_bytes_s = 0;  // Sum of each round's GB/s, with target_netns.
  std::vector<Timed> store(stores.size());
  auto add = [](Timed* into, const Timed& t) {
    into->ops += t.ops;
    into->seconds += t.seconds;
    into->latencies_us.insert(into->latencies_us.end(), t.latencies_us.begin(),
                              t.latencies_us.end());
  };
  for (int i = 0; i < rounds; ++i) {
    Timed t = RunFor(o.clients, slice, raw_op);
    SLUICE_RETURN_IF_ERROR(t.error);
    add(&raw_total, t);
    if (!o.target_netns.empty()) {
      SLUICE_ASSIGN_OR_RETURN(
          double gbps,
          SocketBaselineGbps(o.target_address, static_cast<std::uint16_t>(std::stoul(raw->Word(2))),
                             !put, per_client, slice, local.data));
      socket_bytes_s += gbps;
    }
    for (std::size_t k = 0; k < stores.size(); ++k) {
      // Alternate which store goes first, so neither always follows the raw run.
      const std::size_t at = (k + static_cast<std::size_t>(i)) % stores.size();
      t = RunFor(o.clients, slice, store_op(stores[at].client.get()));
      SLUICE_RETURN_IF_ERROR(t.error);
      add(&store[at], t);
    }
  }
  StoreBenchResult r;
  r.options = o;
  r.ops_per_s = static_cast<double>(store[0].ops) / store[0].seconds;
  r.gbps = r.ops_per_s * static_cast<double>(o.value_size) / 1e9;
  r.raw_gbps = static_cast<double>(raw_total.ops * o.value_size) / raw_total.seconds / 1e9;
  r.p50_us = Percentile(store[0].latencies_us, 0.5);
  r.p99_us = Percentile(store[0].latencies_us, 0.99);
  r.socket_gbps = socket_bytes_s / rounds;
  r.raw_p50_us = Percentile(raw_total.latencies_us, 0.5);
  r.raw_p99_us = Percentile(raw_total.latencies_us, 0.99);
  if (credential_at > 0) {
    Timed& t = store[credential_at];
    r.credential_gbps = static_cast<double>(t.ops * o.value_size) / t.seconds / 1e9;
    r.credential_p50_us = Percentile(t.latencies_us, 0.5);
    r.credential_p99_us = Percentile(t.latencies_us, 0.99);
  }
  if (durable_at > 0) {
    Timed& t = store[durable_at];
    r.durable_gbps = static_cast<double>(t.ops * o.value_size) / t.seconds / 1e9;
    r.durable_p50_us = Percentile(t.latencies_us, 0.5);
    r.durable_p99_us = Percentile(t.latencies_us, 0.99);
  }
  return r;
}

std::string ToJson(const StoreBenchResult& r) {
  nlohmann::json j;
  j["value_size"] = r.options.value_size;
  j["op"] = r.options.op;
  j["transport"] = r.options.transport;
  j["clients"] = r.options.clients;
  j["duration_s"] = r.options.duration_s;
  j["ops_per_s"] = r.ops_per_s;
  j["gbps"] = r.gbps;
  j["raw_gbps"] = r.raw_gbps;
  j["ratio"] = r.raw_gbps > 0 ? r.gbps / r.raw_gbps : 0.0;
  j["p50_us"] = r.p50_us;
  j["p99_us"] = r.p99_us;
  j["raw_p50_us"] = r.raw_p50_us;
  j["raw_p99_us"] = r.raw_p99_us;
  if (r.options.credential_ab) {
    j["credential_gbps"] = r.credential_gbps;
    j["credential_ratio"] = r.gbps > 0 ? r.credential_gbps / r.gbps : 0.0;
    j["credential_p50_us"] = r.credential_p50_us;
    j["credential_p99_us"] = r.credential_p99_us;
  }
  if (!r.options.target_netns.empty()) {
    j["target_netns"] = r.options.target_netns;
    j["target_address"] = r.options.target_address;
    j["socket_gbps"] = r.socket_gbps;
    j["socket_ratio"] = r.socket_gbps > 0 ? r.gbps / r.socket_gbps : 0.0;
  }
  if (r.options.durable_ab) {
    j["durable_gbps"] = r.durable_gbps;
    j["durable_ratio"] = r.gbps > 0 ? r.durable_gbps / r.gbps : 0.0;
    j["durable_p50_us"] = r.durable_p50_us;
    j["durable_p99_us"] = r.durable_p99_us;
  }
  j["unit"] = "GB/s (1e9 bytes/s)";
  return j.dump();
}

}  // namespace sluice::bench
