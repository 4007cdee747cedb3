// Cluster mode across hosts: three network namespaces on a bridge stand in
// for three hosts, each with its own address and host id. A runs the
// master and the orchestrator; B a store node and two denoise workers; C a
// store node and the encode and decode workers. Images and videos come out
// byte for byte as the reference pipeline makes them in one place, the
// workers' own counters show payloads crossing hosts over tcp and staying
// on a host over shared memory, a shaped link still serves (with latency
// and loss added too), and a host cut
// off mid-job has its work re-run elsewhere and rejoins when its link
// returns. Needs root (label netns); skipped without it.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <thread>

#include <gtest/gtest.h>

#include "command_output.h"
#include "metrics_text.h"
#include "netns_hosts.h"
#include "reference_bytes.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kA = 0, kB = 1, kC = 2;

// Milliseconds a tcp connect to a closed port at `address` takes to be
// refused: one round trip to the host (its RST is its own packet). The
// fastest of three, so a stall of this loaded machine does not count.
double RefusedConnectMs(const std::string& address) {
  double fastest = 1e9;
  for (int i = 0; i < 3; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(9);
    ::inet_pton(AF_INET, address.c_str(), &to.sin_addr);
    const auto start = Clock::now();
    const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
    fastest =
        std::min(fastest, std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    EXPECT_NE(rc, 0) << "port 9 on " << address << " is closed";
    ::close(fd);
  }
  return fastest;
}

class NetnsClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NetnsHosts::Available()) {
      GTEST_SKIP() << "needs root and iproute2 (network namespaces)";
    }
    char tmpl[] = "/tmp/sluice-netns-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    hosts_ = std::make_unique<NetnsHosts>(3);
    ASSERT_TRUE(hosts_->ok()) << "could not make the test hosts";
    token_ = dir_ + "/token";
    std::ofstream(token_) << "5f0e1d2c3b4a59687f8e9dacbbcad9e8\n";
    ASSERT_EQ(::chmod(token_.c_str(), 0600), 0);
    const std::string a = hosts_->address(kA);
    ChildProcess& master =
        Role(kA, "master",
             {"master", "--listen", a + ":0", "--metrics-port", "0", "--node-timeout-ms", "2000"});
    ASSERT_EQ(master.Word(1), "master") << master.banner();
    master_ = master.Word(2);
    ASSERT_EQ(master_.rfind(a + ":", 0), 0u) << "the master advertises its host's address";
    metrics_ = master.Word(3);
    ChildProcess& orch = Role(kA, "orchestrator",
                              {"orchestrator", "--listen", a + ":0", "--http", a + ":0",
                               "--store-master", master_, "--worker-timeout-ms", "1500"});
    ASSERT_EQ(orch.Word(1), "orchestrator") << orch.banner();
    orch_ = orch.Word(2);
    http_ep_ = orch.Word(3);
    for (int h : {kB, kC}) {
      ChildProcess& node = Role(h, "node",
                                {"store-node", "--master", master_, "--memory", "128MiB",
                                 "--listen", hosts_->address(h) + ":0"});
      ASSERT_EQ(node.Word(1), "store-node") << node.banner();
    }
    for (const auto& [h, stage] : {std::pair{kC, "encode"}, std::pair{kB, "denoise"},
                                   std::pair{kB, "denoise"}, std::pair{kC, "decode"}}) {
      ChildProcess& w = Worker(h, stage);
      ASSERT_EQ(w.Word(1), "worker") << w.banner();
    }
    http_ = std::make_unique<httplib::Client>("http://" + http_ep_);
    http_->set_connection_timeout(2, 0);
    http_->set_read_timeout(10, 0);
  }
  void TearDown() override {
    hosts_.reset();
    if (!dir_.empty() && HasFailure()) {
      std::printf("netns: logs kept in %s\n", dir_.c_str());
    } else if (!dir_.empty()) {
      (void)!std::system(("rm -rf " + dir_).c_str());
    }
  }

  ChildProcess& Role(int host, const std::string& name, std::vector<std::string> args) {
    std::vector<std::string> argv = {SLUICE_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    // The hosts' network is the test's own: gRPC in plaintext is allowed
    // there (a token beyond loopback otherwise requires TLS). Payloads
    // between hosts are encrypted (the engines' tcp between namespaces).
    for (const char* a : {"--cluster-token", token_.c_str(), "--insecure", "--encrypt-data",
                          "--exit-on-stdin-eof"}) {
      argv.push_back(a);
    }
    return hosts_->Start(host, argv, dir_ + "/" + name + "." + std::to_string(logs_++) + ".log");
  }
  ChildProcess& Worker(int host, const std::string& stage) {
    return Role(host, stage,
                {"worker", "--stage", stage, "--orchestrator", orch_, "--master", master_,
                 "--listen", hosts_->address(host) + ":0", "--checkpoint-every", "2"});
  }

  // Submits `body` (async); its id, or "" with a test failure.
  std::string Submit(json body) {
    const bool video = body.contains("frames");
    if (!video) {
      body["async"] = true;
    }
    auto r = http_->Post(video ? "/v1/videos" : "/v1/images/generations", body.dump(),
                         "application/json");
    EXPECT_TRUE(r && (r->status == 200 || r->status == 202)) << (r ? r->body : "no answer");
    return r ? json::parse(r->body, nullptr, false).value("id", "") : "";
  }
  // Waits (up to `limit`) for job `id` to finish; its last view.
  json Finish(const std::string& id, std::chrono::seconds limit = 120s) {
    json j;
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (auto r = http_->Get("/v1/jobs/" + id); r && r->status == 200) {
        j = json::parse(r->body, nullptr, false);
        const std::string s = j.value("status", "");
        if (s != "queued" && s != "running") {
          break;
        }
      }
      std::this_thread::sleep_for(50ms);
    }
    return j;
  }
  // Every job of `bodies` succeeds with the reference pipeline's bytes.
  void ExpectServed(const std::vector<json>& bodies) {
    std::vector<std::string> ids;
    for (const json& b : bodies) {
      ids.push_back(Submit(b));
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const json j = Finish(ids[i]);
      ASSERT_EQ(j.value("status", ""), "succeeded") << j.dump();
      auto content = http_->Get("/v1/jobs/" + ids[i] + "/content");
      ASSERT_TRUE(content && content->status == 200);
      EXPECT_EQ(content->body, ReferenceBytes(bodies[i])) << "job " << i << " " << bodies[i].dump();
    }
  }
  // A stage's workers' bytes over `transport` in `direction`, once the
  // heartbeats caught up (the figure is read until it stops changing).
  double Bytes(const char* stage, const char* transport, const char* direction) {
    const std::string name = std::string("sluice_worker_transfer_bytes_total{stage=\"") + stage +
                             "\",transport=\"" + transport + "\",direction=\"" + direction + "\"}";
    double last = -2;
    for (int i = 0; i < 20; ++i) {
      const double v = MetricValue(http_ep_, name);
      if (v == last) {
        break;
      }
      last = v;
      std::this_thread::sleep_for(300ms);
    }
    return last;
  }
  double Workers(const char* stage) {
    return MetricValue(http_ep_, std::string("sluice_orchestrator_workers{model=\"") +
                                     "sluice-reference\",stage=\"" + stage + "\"}");
  }

  std::string dir_, token_, master_, metrics_, orch_, http_ep_;
  int logs_ = 0;
  std::unique_ptr<NetnsHosts> hosts_;
  std::unique_ptr<httplib::Client> http_;
};

json Image(int seed) {
  return {{"prompt", "a harbour at dusk " + std::to_string(seed)},
          {"size", "96x64"},
          {"steps", 6},
          {"seed", seed}};
}
json Video(int seed, int steps = 4) {
  return {{"prompt", "waves " + std::to_string(seed)},
          {"size", "64x64"},
          {"steps", steps},
          {"frames", 9},
          {"seed", seed}};
}

TEST_F(NetnsClusterTest, ThreeHostsServeAndPayloadsCrossHostsOverTcpOnly) {
  ExpectServed({Image(1), Video(2), Image(3), Video(4)});
  // Writes stay on the writer's host (shared memory with its store node);
  // reads of what another host wrote cross over tcp.
  EXPECT_GT(Bytes("encode", "shm", "write"), 0);
  EXPECT_EQ(Bytes("encode", "tcp", "write"), 0);
  EXPECT_GT(Bytes("denoise", "tcp", "read"), 0) << "conditions from C's node";
  EXPECT_GT(Bytes("denoise", "shm", "write"), 0) << "latents to B's node";
  EXPECT_EQ(Bytes("denoise", "tcp", "write"), 0);
  EXPECT_GT(Bytes("decode", "tcp", "read"), 0) << "latents from B's node";
  EXPECT_EQ(Bytes("decode", "shm", "read"), 0);

  // A slow link (B's egress shaped to 200 Mbit/s), then latency and loss on
  // it as well: jobs still complete.
  ASSERT_TRUE(hosts_->Shape(kB, "tbf rate 200mbit burst 256kb latency 50ms"));
  ExpectServed({Image(5), Video(6)});
#ifdef SLUICE_LINK_IMPAIR_BIN
  EXPECT_LT(RefusedConnectMs(hosts_->address(kB)), 2.0);
  ASSERT_TRUE(hosts_->Impair(kB, SLUICE_LINK_IMPAIR_BIN, 2000, 10));
  EXPECT_GE(RefusedConnectMs(hosts_->address(kB)), 2.0) << "B's answers wait 2 ms";
  ExpectServed({Image(7), Video(8)});
  const auto [passed, dropped] = hosts_->EndImpair(kB);
  EXPECT_GT(passed, 0);
  EXPECT_GT(dropped, 0) << "1% of B's packets were lost";
  std::printf("netns: B's link +2 ms and 1%% loss: %ld packets passed, %ld dropped\n", passed,
              dropped);
  ASSERT_TRUE(hosts_->Run(kB, "tc qdisc del dev eth0 root"));
#else
  ASSERT_TRUE(hosts_->Run(kB, "tc qdisc del dev eth0 root"));
  // Visible: CTest reports the suite skipped, and scripts/test.sh fails on it.
  GTEST_SKIP() << "built without libnetfilter_queue (libnetfilter-queue-dev): latency and loss "
                  "not exercised";
#endif
}

TEST_F(NetnsClusterTest, AHostCutOffMidJobHasItsWorkRerunElsewhereAndRejoins) {
  // Longer videos, so B's denoise workers are busy when its link goes.
  std::vector<json> bodies;
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    bodies.push_back(Video(20 + i, 24));
    ids.push_back(Submit(bodies.back()));
  }
  const auto deadline = Clock::now() + 60s;
  bool denoising = false;
  while (!denoising && Clock::now() < deadline) {
    auto r = http_->Get("/v1/jobs/" + ids[0]);
    denoising = r && json::parse(r->body, nullptr, false).value("stage", "") == "denoise";
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(denoising) << "the first video never reached denoise";
  ASSERT_TRUE(hosts_->SetLink(kB, false));
  // Denoise capacity elsewhere: C takes the work B held.
  ChildProcess& spare = Worker(kC, "denoise");
  ASSERT_EQ(spare.Word(1), "worker") << spare.banner();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const json j = Finish(ids[i], 180s);
    ASSERT_EQ(j.value("status", ""), "succeeded") << j.dump();
    auto content = http_->Get("/v1/jobs/" + ids[i] + "/content");
    ASSERT_TRUE(content && content->status == 200);
    EXPECT_EQ(content->body, ReferenceBytes(bodies[i])) << "job " << i;
  }
  auto events = http_->Get("/v1/jobs/" + ids[0] + "/events");
  ASSERT_TRUE(events);
  EXPECT_NE(events->body.find("worker_lost"), std::string::npos)
      << "the first video ran on B when it was cut off: " << events->body;
  EXPECT_EQ(Workers("denoise"), 1) << "B's denoise workers are gone";

  // The link returns: B's workers and store node rejoin and serve again.
  ASSERT_TRUE(hosts_->SetLink(kB, true));
  const auto rejoin = Clock::now() + 30s;
  while (Workers("denoise") < 3 && Clock::now() < rejoin) {
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(Workers("denoise"), 3) << "B's denoise workers registered again";
  while (MetricValue(metrics_, "sluice_store_nodes") < 2 && Clock::now() < rejoin) {
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(MetricValue(metrics_, "sluice_store_nodes"), 2) << "B's store node registered again";
  ChildProcess& stop = spare;
  stop.Kill();  // Only B's denoise workers now.
  ExpectServed({Image(30), Video(31)});
}

// `sluice bench transfer` and `bench store` to a target on another host
// over a link shaped to 10 Gbit/s each way, plain and with 100 µs added to
// its round trip: the engine against a plain socket on the same link in
// the same run (the figures are printed; the target ratio, 0.9, is a
// benchmark's, not this test's).
// The added round trips the benches run at: none, and 100 µs where the
// link can be impaired.
std::vector<int> BenchRttsUs() {
#ifdef SLUICE_LINK_IMPAIR_BIN
  return {0, 100};
#else
  return {0};
#endif
}

// `sluice bench KIND` against host 0 of `hosts` (its targets there), after
// shaping its link to 10 Gbit/s each way (tbf) and holding what host 0
// sends for `rtt_us`: its JSON, or null when it failed (said by the test).
json BenchAcrossAShapedLink(NetnsHosts& hosts, const std::string& kind, const std::string& args,
                            int rtt_us) {
  const std::string tbf = "tbf rate 10gbit burst 4mb latency 5ms";
  EXPECT_TRUE(hosts.Shape(0, tbf) && hosts.ShapeInbound(0, tbf));
#ifdef SLUICE_LINK_IMPAIR_BIN
  if (rtt_us > 0) {
    EXPECT_TRUE(hosts.Impair(0, SLUICE_LINK_IMPAIR_BIN, rtt_us, 0));
  }
#endif
  const std::string cmd = std::string(SLUICE_BIN) + " bench " + kind + " --target-netns " +
                          hosts.Ns(0) + " --target-address " + hosts.address(0) + " " + args +
                          " --duration 2 --json 2>/dev/null";
  int status = 0;
  const std::string out = CommandOutput(cmd, &status);
  if (rtt_us > 0) {
    EXPECT_GT(hosts.EndImpair(0).first, 0) << "the bench's packets went through the delay";
  }
  EXPECT_EQ(status, 0) << cmd;
  const json j = json::parse(out, nullptr, false);
  EXPECT_TRUE(j.is_object()) << cmd << ": " << out;
  EXPECT_EQ(j.is_object() ? j.value("target_netns", "") : "", hosts.Ns(0));
  return j.is_object() ? j : json();
}

// A rate (GB/s) that crossed the shaped 10 Gbit/s link: more than nothing,
// and not above the link (1.25 GB/s, with tbf's burst) -- a bench that
// missed the namespace and ran over loopback would exceed it.
void ExpectOverTheLink(const json& j, const char* field) {
  const double gbps = j.value(field, 0.0);
  EXPECT_GT(gbps, 0.05) << field;
  EXPECT_LT(gbps, 1.4) << field << ": faster than the 10 Gbit/s link";
}

// Runs `sluice bench KIND ARGS --op OP` over a fresh host's shaped link for
// each op at each added round trip, handing each JSON to `check` (after
// asserting it is one).
void BenchEachOpAndRtt(const std::string& kind, const std::string& args,
                       std::initializer_list<const char*> ops,
                       const std::function<void(const json&, const char*, int)>& check) {
  NetnsHosts hosts(1);
  ASSERT_TRUE(hosts.ok());
  for (const int rtt_us : BenchRttsUs()) {
    for (const char* op : ops) {
      const json j = BenchAcrossAShapedLink(hosts, kind, args + " --op " + op, rtt_us);
      ASSERT_TRUE(j.is_object());
      check(j, op, rtt_us);
    }
  }
}

TEST(NetnsBenchTest, TransferBetweenTwoHostsOnAShapedLink) {
  if (!NetnsHosts::Available()) {
    GTEST_SKIP() << "needs root and iproute2 (network namespaces)";
  }
  BenchEachOpAndRtt("transfer", "", {"write", "read"}, [](const json& j, const char* op, int rtt) {
    ExpectOverTheLink(j, "gbps");
    ExpectOverTheLink(j, "baseline_gbps");
    // The bytes it counts are whole batches of whole blocks, and its ratio
    // is its rate over the socket's on the same link.
    EXPECT_EQ(j.value("bytes", 0.0),
              j.value("batches", 0.0) * j.value("batch", 0.0) * j.value("block_size", 0.0));
    EXPECT_NEAR(j.value("ratio", 0.0), j.value("gbps", 0.0) / j.value("baseline_gbps", 1.0), 0.01);
    EXPECT_GE(j.value("ratio", 0.0), 0.3) << "the engine within 3x of a socket on the same link";
    std::printf(
        "netns bench transfer %s over a 10 Gbit/s link, +%d us RTT: %.3f GB/s, socket %.3f "
        "GB/s, ratio %.2f\n",
        op, rtt, j.value("gbps", 0.0), j.value("baseline_gbps", 0.0), j.value("ratio", 0.0));
  });
}

TEST(NetnsBenchTest, StoreBetweenTwoHostsOnAShapedLink) {
  if (!NetnsHosts::Available()) {
    GTEST_SKIP() << "needs root and iproute2 (network namespaces)";
  }
  BenchEachOpAndRtt("store", "--transport tcp", {"put", "get"},
                    [](const json& j, const char* op, int rtt) {
                      ExpectOverTheLink(j, "gbps");
                      ExpectOverTheLink(j, "socket_gbps");
                      // Its rate is its operations' bytes.
                      EXPECT_NEAR(j.value("gbps", 0.0),
                                  j.value("ops_per_s", 0.0) * j.value("value_size", 0.0) / 1e9,
                                  0.02 * j.value("gbps", 0.0));
                      EXPECT_NEAR(j.value("socket_ratio", 0.0),
                                  j.value("gbps", 0.0) / j.value("socket_gbps", 1.0), 0.01);
                      EXPECT_GE(j.value("socket_ratio", 0.0), 0.3);
                      std::printf(
                          "netns bench store %s over a 10 Gbit/s link, +%d us RTT: %.3f GB/s, raw "
                          "engine %.3f GB/s, socket %.3f GB/s, ratio to the socket %.2f\n",
                          op, rtt, j.value("gbps", 0.0), j.value("raw_gbps", 0.0),
                          j.value("socket_gbps", 0.0), j.value("socket_ratio", 0.0));
                    });
}

}  // namespace
}  // namespace sluice::testing
