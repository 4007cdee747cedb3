// Chaos: cluster mode on loopback — a master, two store nodes (one with a
// disk tier), an orchestrator on its journal, 2 encode, 3 denoise and 2
// decode workers, each a `sluice` process — under a steady stream of image
// and video jobs, with a fault every few seconds from a seeded schedule:
// each role in turn is killed with SIGKILL and restarted (the master and
// the orchestrator on their ports, the disk node on its disk tier), and a
// worker is stopped (SIGSTOP) for a while and continued. At the end every
// accepted job has succeeded with the bytes the reference pipeline gives
// in one place, the store holds no job's bytes, and no process grew past
// a memory bound. The counts are printed.
//
// SLUICE_CHAOS_SECONDS (default 45: two rounds of the six faults) sets the fault phase of each run
// and SLUICE_CHAOS_SEED (default 7) the schedule; SLUICE_CHAOS_CONDITION_CACHE=0 runs
// the encode workers without the condition cache, SLUICE_CHAOS_DENOISE_BATCH=K
// runs the denoise workers batching up to K jobs' steps (a job's result
// is then checked within PSNR 40 dB of the reference pipeline's, not byte
// for byte: a step in a batch is within float32 rounding of it alone),
// SLUICE_CHAOS_BIN names the binary.
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "child_process.h"
#include "common/testing/free_port.h"
#include "common/testing/test_pki.h"
#include "metrics_text.h"
#include "reference_bytes.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Anonymous memory one process may hold (store memory is shared memory
// and not counted).
constexpr long kRssAnonBoundKiB = 512 * 1024;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// RssAnon of `pid` in KiB (0 if unreadable).
long RssAnonKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("RssAnon:", 0) == 0) {
      return std::atol(line.c_str() + 8);
    }
  }
  return 0;
}

// One role: how it is started, and its current process.
struct Role {
  std::string name;
  std::vector<std::string> args;  // After the binary; security flags added at start.
  bool wait_ready = true;         // Restarts of workers do not wait for READY.
  std::unique_ptr<ChildProcess> proc;
  int incarnation = 0;
  bool stopped = false;
  long max_rss_kib = 0;
};

struct Accepted {
  std::string id;
  json body;
};

enum class Fault {
  kKillWorker,
  kStopWorker,
  kKillOrchestrator,
  kKillMaster,
  kKillDiskNode,
  kKillMemoryNode
};
constexpr Fault kFaults[] = {Fault::kKillWorker, Fault::kStopWorker,   Fault::kKillOrchestrator,
                             Fault::kKillMaster, Fault::kKillDiskNode, Fault::kKillMemoryNode};
const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kKillWorker:
      return "kill-worker";
    case Fault::kStopWorker:
      return "stop-worker";
    case Fault::kKillOrchestrator:
      return "kill-orchestrator";
    case Fault::kKillMaster:
      return "kill-master";
    case Fault::kKillDiskNode:
      return "kill-disk-node";
    case Fault::kKillMemoryNode:
      return "kill-memory-node";
  }
  return "?";
}

class ChaosCluster {
 public:
  ChaosCluster(std::string dir, std::vector<std::string> security)
      : dir_(std::move(dir)), security_(std::move(security)) {
    master_ep_ = internal::FreeLoopbackEndpoint();
    metrics_port_ = internal::FreeLoopbackPort();
    orch_ep_ = internal::FreeLoopbackEndpoint();
    http_ep_ = internal::FreeLoopbackEndpoint();
    Add("master",
        {"master", "--listen", master_ep_, "--metrics-port", std::to_string(metrics_port_)});
    Add("node-mem", {"store-node", "--master", master_ep_, "--memory", "96MiB"});
    const std::string disk = dir_ + "/disk";
    (void)::mkdir(disk.c_str(), 0700);
    Add("node-disk", {"store-node", "--master", master_ep_, "--memory", "24MiB", "--node-id",
                      "node-disk", "--disk", disk, "--disk-size", "128MiB"});
    Add("orchestrator",
        {"orchestrator", "--listen", orch_ep_, "--http", http_ep_, "--store-master", master_ep_,
         "--journal", dir_ + "/journal.db", "--worker-timeout-ms", "1500"});
    const std::pair<const char*, int> pools[] = {{"encode", 2}, {"denoise", 3}, {"decode", 2}};
    for (const auto& [stage, n] : pools) {
      for (int i = 0; i < n; ++i) {
        workers_.push_back(roles_.size());
        // With the condition cache (the default), unless
        // SLUICE_CHAOS_CONDITION_CACHE=0. A stall seen once in six runs
        // (docs/roadmap.md §10) did not recur in 24 runs since; a stall
        // dumps the workers' stacks (DumpStuck).
        std::vector<std::string> args = {"worker", "--stage",  stage,      "--orchestrator",
                                         orch_ep_, "--master", master_ep_, "--checkpoint-every",
                                         "2"};
        if (std::string_view(stage) == "encode" && EnvInt("SLUICE_CHAOS_CONDITION_CACHE", 1) == 0) {
          args.push_back("--no-condition-cache");
        }
        if (std::string_view(stage) == "denoise" && EnvInt("SLUICE_CHAOS_DENOISE_BATCH", 1) > 1) {
          args.push_back("--denoise-batch");
          args.push_back(std::to_string(EnvInt("SLUICE_CHAOS_DENOISE_BATCH", 1)));
        }
        Add(std::string(stage) + std::to_string(i), args);
      }
    }
  }

  // Starts every role in order; false if one did not come up.
  bool StartAll() {
    for (Role& r : roles_) {
      if (!Start(r)) {
        return false;
      }
      r.wait_ready = r.args[0] != "worker";
    }
    return true;
  }

  // Kills (SIGKILL) role `r` and starts it again after `down`.
  bool Restart(Role& r, std::chrono::milliseconds down) {
    r.proc->Kill();
    r.stopped = false;
    std::this_thread::sleep_for(down);
    return Start(r);
  }

  // Brings every role back: continues stopped ones, restarts dead ones.
  bool Heal() {
    bool ok = true;
    for (Role& r : roles_) {
      if (r.stopped) {
        r.proc->Signal(SIGCONT);
        r.stopped = false;
      }
      if (r.proc->Wait(0) != -1) {
        ok = Start(r) && ok;
      }
    }
    return ok;
  }

  // Samples each live process's anonymous memory.
  void SampleMemory() {
    for (Role& r : roles_) {
      if (r.proc->pid() > 0) {
        r.max_rss_kib = std::max(r.max_rss_kib, RssAnonKiB(r.proc->pid()));
      }
    }
  }

  // What a stall leaves to read: the orchestrator's pool gauges on
  // stdout, and every live worker's threads' stacks (gdb, where present)
  // in the log directory.
  void DumpStuck(httplib::Client& http) {
    if (auto m = http.Get("/metrics"); m && m->status == 200) {
      std::istringstream in(m->body);
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("sluice_orchestrator_queued{", 0) == 0 ||
            line.rfind("sluice_orchestrator_workers{", 0) == 0 ||
            line.rfind("sluice_orchestrator_free_slots{", 0) == 0 ||
            line.rfind("sluice_orchestrator_running", 0) == 0) {
          std::printf("chaos: stalled: %s\n", line.c_str());
        }
      }
    }
    if (::access("/usr/bin/gdb", X_OK) != 0) {
      return;
    }
    for (const Role& r : roles_) {
      if (r.args[0] == "worker" && r.proc->pid() > 0) {
        (void)!std::system(("/usr/bin/gdb -p " + std::to_string(r.proc->pid()) +
                            " -batch -ex 'thread apply all bt' > " + dir_ + "/" + r.name +
                            ".stacks 2>&1")
                               .c_str());
      }
    }
  }

  Role& role(std::size_t i) { return roles_[i]; }
  // Kills the role named `name` and starts it again after `down`; false
  // (a test failure naming it) when there is no such role.
  bool Restart(const std::string& name, std::chrono::milliseconds down) {
    for (Role& r : roles_) {
      if (r.name == name) {
        return Restart(r, down);
      }
    }
    ADD_FAILURE() << "the chaos cluster has no role '" << name << "'";
    return false;
  }
  const std::vector<std::size_t>& workers() const { return workers_; }
  const std::vector<Role>& roles() const { return roles_; }
  const std::string& http_ep() const { return http_ep_; }
  std::string metrics_ep() const { return "127.0.0.1:" + std::to_string(metrics_port_); }

 private:
  void Add(std::string name, std::vector<std::string> args) {
    Role r;
    r.name = std::move(name);
    r.args = std::move(args);
    roles_.push_back(std::move(r));
  }
  bool Start(Role& r) {
    // SLUICE_CHAOS_BIN: a copy of the binary, so a long series of runs
    // is not hit by a rebuild replacing the file roles restart from.
    const char* bin = std::getenv("SLUICE_CHAOS_BIN");
    std::vector<std::string> argv = {bin != nullptr && *bin != '\0' ? bin : SLUICE_BIN};
    argv.insert(argv.end(), r.args.begin(), r.args.end());
    argv.insert(argv.end(), security_.begin(), security_.end());
    argv.push_back("--exit-on-stdin-eof");
    const std::string log = dir_ + "/" + r.name + "." + std::to_string(r.incarnation++) + ".log";
    r.proc = std::make_unique<ChildProcess>(argv, r.wait_ready ? 30000 : 0, log);
    if (r.wait_ready && r.proc->Word(0) != "READY") {
      ADD_FAILURE() << r.name << " did not come up (banner '" << r.proc->banner() << "'); see "
                    << log;
      return false;
    }
    return true;
  }

  std::string dir_;
  std::vector<std::string> security_;
  std::string master_ep_, orch_ep_, http_ep_;
  int metrics_port_ = 0;
  std::vector<Role> roles_;
  std::vector<std::size_t> workers_;
};

// Submits an image or a video every ~300 ms until stopped; remembers the
// ones the orchestrator accepted (answered with an id).
class Load {
 public:
  explicit Load(const std::string& http_ep) : http_("http://" + http_ep) {
    http_.set_connection_timeout(2, 0);
    http_.set_read_timeout(10, 0);
    thread_ = std::thread([this] { Run(); });
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) {
      thread_.join();
    }
  }
  std::vector<Accepted> accepted() {
    std::lock_guard<std::mutex> l(mu_);
    return accepted_;
  }
  // Submissions not accepted, by answer ("no answer", "HTTP 503", ...).
  std::string refused() {
    std::lock_guard<std::mutex> l(mu_);
    std::string out;
    for (const auto& [why, n] : refused_) {
      out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + why;
    }
    return out.empty() ? "none" : out;
  }

 private:
  void Run() {
    for (int i = 0; !stop_; ++i) {
      const bool video = i % 2 == 1;
      json body = {{"prompt", "chaos " + std::to_string(i)},
                   {"size", video ? "64x64" : "96x64"},
                   {"steps", video ? 4 : 6},
                   {"seed", i}};
      if (video) {
        body["frames"] = 9;
      } else {
        body["async"] = true;
      }
      auto r = http_.Post(video ? "/v1/videos" : "/v1/images/generations", body.dump(),
                          "application/json");
      std::string id;
      if (r && (r->status == 200 || r->status == 202)) {
        id = json::parse(r->body, nullptr, false).value("id", "");
      }
      std::lock_guard<std::mutex> l(mu_);
      if (id.empty()) {
        ++refused_[r ? "HTTP " + std::to_string(r->status) : "no answer"];
      } else {
        body.erase("async");
        accepted_.push_back({id, body});
      }
      std::this_thread::sleep_for(300ms);
    }
  }

  httplib::Client http_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::string, int> refused_;
  std::vector<Accepted> accepted_;
  std::thread thread_;
};

class ChaosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-chaos-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (HasFailure()) {
      std::printf("chaos: logs kept in %s\n", dir_.c_str());
    } else {
      (void)!std::system(("rm -rf " + dir_).c_str());
    }
  }

  void Run(const std::vector<std::string>& security) {
    const int seconds = EnvInt("SLUICE_CHAOS_SECONDS", 45);
    const int seed = EnvInt("SLUICE_CHAOS_SEED", 7);
    ChaosCluster c(dir_, security);
    ASSERT_TRUE(c.StartAll());
    Load load(c.http_ep());

    // The schedule: rounds of every fault kind in a seeded order, 3-5 s
    // apart, so each role is hit in turn.
    std::mt19937 rng(static_cast<std::uint32_t>(seed));
    std::map<std::string, int> faults;
    std::vector<Fault> round;
    const auto end = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(3000 + rng() % 2000));
      c.SampleMemory();
      if (round.empty()) {
        round.assign(std::begin(kFaults), std::end(kFaults));
        std::shuffle(round.begin(), round.end(), rng);
      }
      const Fault f = round.back();
      round.pop_back();
      ++faults[FaultName(f)];
      Role& worker = c.role(c.workers()[rng() % c.workers().size()]);
      switch (f) {
        case Fault::kKillWorker:
          ASSERT_TRUE(c.Restart(worker, 300ms));
          break;
        case Fault::kStopWorker:
          worker.proc->Signal(SIGSTOP);
          worker.stopped = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(1000 + rng() % 2000));
          worker.proc->Signal(SIGCONT);
          worker.stopped = false;
          break;
        case Fault::kKillOrchestrator:
          ASSERT_TRUE(c.Restart("orchestrator", 1s));
          break;
        case Fault::kKillMaster:
          ASSERT_TRUE(c.Restart("master", 1s));
          break;
        case Fault::kKillDiskNode:
          ASSERT_TRUE(c.Restart("node-disk", 500ms));
          break;
        case Fault::kKillMemoryNode:
          ASSERT_TRUE(c.Restart("node-mem", 500ms));
          break;
      }
    }
    load.Stop();
    ASSERT_TRUE(c.Heal());

    // Every accepted job finishes, within a bound.
    const std::vector<Accepted> jobs = load.accepted();
    httplib::Client http("http://" + c.http_ep());
    http.set_connection_timeout(2, 0);
    http.set_read_timeout(10, 0);
    std::map<std::string, json> final_state, last_seen;
    const auto drain_deadline = Clock::now() + 180s;
    for (const Accepted& a : jobs) {
      while (Clock::now() < drain_deadline) {
        auto r = http.Get("/v1/jobs/" + a.id);
        if (r && r->status == 200) {
          json j = json::parse(r->body, nullptr, false);
          const std::string s = j.value("status", "");
          last_seen[a.id] = j;
          if (s != "queued" && s != "running") {
            final_state[a.id] = std::move(j);
            break;
          }
        }
        std::this_thread::sleep_for(100ms);
      }
    }
    if (final_state.size() < jobs.size()) {
      c.DumpStuck(http);
    }
    c.SampleMemory();
    int succeeded = 0, wrong_bytes = 0;
    for (const Accepted& a : jobs) {
      auto it = final_state.find(a.id);
      if (it == final_state.end()) {
        ADD_FAILURE() << a.id << " did not finish: " << a.body.dump() << "; last seen "
                      << last_seen[a.id].dump();
        continue;
      }
      if (it->second.value("status", "") != "succeeded") {
        ADD_FAILURE() << a.id << " " << it->second.dump();
        continue;
      }
      ++succeeded;
      auto content = http.Get("/v1/jobs/" + a.id + "/content");
      const bool batching = EnvInt("SLUICE_CHAOS_DENOISE_BATCH", 1) > 1;
      if (!content || content->status != 200 ||
          !(content->body == ReferenceBytes(a.body) ||
            (batching && CloseToReference(content->body, a.body)))) {
        ++wrong_bytes;
        ADD_FAILURE() << a.id << ": its result is not the reference pipeline's ("
                      << (content ? std::to_string(content->body.size()) + " bytes" : "no answer")
                      << ")";
      }
    }

    // The store holds no job's bytes once every job is done (the cleanup of
    // the last ones may trail their answers by a moment); the condition
    // cache's entries are no job's and stay.
    double objects = -1;
    const auto store_deadline = Clock::now() + 60s;
    while (Clock::now() < store_deadline) {
      objects = MetricValue(c.metrics_ep(), "sluice_store_objects") -
                MetricValue(c.metrics_ep(), "sluice_store_objects_cached");
      if (objects == 0) {
        break;
      }
      std::this_thread::sleep_for(200ms);
    }
    EXPECT_EQ(objects, 0) << "job objects left in the store after every job finished";

    std::string fault_counts, memory;
    for (const auto& [name, n] : faults) {
      fault_counts += " " + name + "=" + std::to_string(n);
    }
    for (const Role& r : c.roles()) {
      memory += " " + r.name + "=" + std::to_string(r.max_rss_kib / 1024) + "MiB";
      EXPECT_LT(r.max_rss_kib, kRssAnonBoundKiB) << r.name << " grew past the memory bound";
    }
    std::printf(
        "chaos (seed %d, %d s): %zu accepted, refused: %s; %d succeeded, %d wrong "
        "bytes; faults:%s\nchaos: peak anonymous memory:%s\n",
        seed, seconds, jobs.size(), load.refused().c_str(), succeeded, wrong_bytes,
        fault_counts.c_str(), memory.c_str());
    EXPECT_GT(jobs.size(), static_cast<std::size_t>(seconds))
        << "the load kept arriving through the faults";
  }

  std::string dir_;
};

TEST_F(ChaosTest, EveryAcceptedJobSucceedsThroughSeededFaults) {
  Run({});
}

TEST_F(ChaosTest, EveryAcceptedJobSucceedsThroughSeededFaultsWithTheCredentialAndTls) {
  const Pki pki = MakePki(dir_);
  ASSERT_FALSE(pki.ca.empty()) << "openssl failed";
  std::ofstream(dir_ + "/token") << "9c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f\n";
  ASSERT_EQ(::chmod((dir_ + "/token").c_str(), 0600), 0);
  Run({"--cluster-token", dir_ + "/token", "--tls-cert", pki.cert, "--tls-key", pki.key, "--tls-ca",
       pki.ca});
}

}  // namespace
}  // namespace sluice::testing
