// The HTTP front of a `sluice orchestrator` process under load and abuse,
// driven from raw sockets on loopback: thousands of idle connections, event
// streams and waiting synchronous requests while health probes are
// answered; crafted requests refused without harm; clients that leave have
// their jobs cancelled; a taken port is an error.
#include <sys/resource.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "child_process.h"
#include "common/testing/eventually.h"
#include "http/raw_client.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using http::raw::Conn;
using http::raw::Reply;
using nlohmann::json;
using sluice::internal::Eventually;

std::string Get(const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: t\r\n\r\n";
}
std::string Post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// One request on a fresh connection.
Reply Call(const std::string& ep, const std::string& request) {
  Conn c(ep, 60s);
  EXPECT_TRUE(c.Send(request));
  return c.Read();
}

// The value of an unlabelled counter in /metrics text, or -1.
long Counter(const std::string& ep, const std::string& name) {
  const Reply r = Call(ep, Get("/metrics"));
  std::smatch m;
  if (!std::regex_search(r.body, m, std::regex("\n" + name + " ([0-9]+)"))) {
    return -1;
  }
  return std::stol(m[1]);
}

// The slowest of `n` /healthz probes, each on its own connection.
std::chrono::microseconds SlowestHealthProbe(const std::string& ep, int n) {
  std::chrono::microseconds worst{0};
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const Reply r = Call(ep, Get("/healthz"));
    const auto took = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - t0);
    EXPECT_EQ(r.status, 200);
    worst = std::max(worst, took);
    std::this_thread::sleep_for(10ms);
  }
  return worst;
}

class HttpFrontTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rlimit r{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &r), 0);
    r.rlim_cur = r.rlim_max;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &r), 0);
    ASSERT_GE(r.rlim_cur, 4096u) << "the load test needs ~3,000 descriptors per process";
  }

  // A store (master, node) and an orchestrator whose requests naming no
  // model run on `default_model`; Workers() adds one profile-stage worker
  // (model flux-1024) per stage.
  void StartCluster(const std::string& default_model = "flux-1024") {
    master_ = std::make_unique<ChildProcess>(std::vector<std::string>{
        SLUICE_BIN, "master", "--listen", "127.0.0.1:0", "--exit-on-stdin-eof"});
    ASSERT_EQ(master_->Word(1), "master") << master_->banner();
    node_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{SLUICE_BIN, "store-node", "--master", master_->Word(2), "--memory",
                                 "128MiB", "--exit-on-stdin-eof"});
    ASSERT_EQ(node_->Word(1), "store-node") << node_->banner();
    orch_ = Orchestrator({"--store-master", master_->Word(2), "--default-model", default_model});
  }
  void Workers(const std::string& time_factor) {
    for (const char* stage : {"encode", "denoise", "decode"}) {
      workers_.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
          SLUICE_BIN, "worker", "--stage", stage, "--orchestrator", orch_->Word(2), "--master",
          master_->Word(2), "--profile", "flux-1024", "--time-factor", time_factor,
          "--exit-on-stdin-eof"}));
      ASSERT_EQ(workers_.back()->Word(1), "worker") << workers_.back()->banner();
    }
  }

  // Reference-stage workers (model sluice-reference, named explicitly).
  void ReferenceWorkers() {
    for (const char* stage : {"encode", "denoise", "decode"}) {
      workers_.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
          SLUICE_BIN, "worker", "--stage", stage, "--orchestrator", orch_->Word(2), "--master",
          master_->Word(2), "--model", "sluice-reference", "--steps", "4", "--exit-on-stdin-eof"}));
      ASSERT_EQ(workers_.back()->Word(1), "worker") << workers_.back()->banner();
    }
  }

  std::unique_ptr<ChildProcess> master_, node_, orch_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;

  std::unique_ptr<ChildProcess> Orchestrator(std::vector<std::string> extra) {
    std::vector<std::string> argv = {SLUICE_BIN, "orchestrator", "--exit-on-stdin-eof"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = std::make_unique<ChildProcess>(argv);
    EXPECT_EQ(p->Word(1), "orchestrator") << p->banner();
    return p;
  }
};

TEST_F(HttpFrontTest, HealthAnswersUnderThousandsOfConnectionsAndAbandonedJobsAreCancelled) {
  StartCluster();
  const std::string ep = orch_->Word(3);

  std::vector<std::unique_ptr<Conn>> idle;
  for (int i = 0; i < 2000; ++i) {
    idle.push_back(std::make_unique<Conn>(ep, 30s));
  }
  // One queued job (no workers yet) watched by 500 event streams.
  const Reply job =
      Call(ep, Post("/v1/images/generations", R"({"prompt":"a kite","steps":4,"async":true})"));
  ASSERT_EQ(job.status, 202) << job.body;
  const std::string id = json::parse(job.body)["id"];
  std::vector<std::unique_ptr<Conn>> streams;
  for (int i = 0; i < 500; ++i) {
    streams.push_back(std::make_unique<Conn>(ep, 60s));
    ASSERT_TRUE(streams.back()->Send(Get("/v1/jobs/" + id + "/events")));
    ASSERT_NE(streams.back()->ReadUntil("event: queued"), "") << "stream " << i;
  }
  // 200 synchronous requests waiting for workers that are not there.
  std::vector<std::unique_ptr<Conn>> waiting;
  for (int i = 0; i < 200; ++i) {
    waiting.push_back(std::make_unique<Conn>(ep, 60s));
    ASSERT_TRUE(waiting.back()->Send(
        Post("/v1/images/generations", R"({"prompt":"wait )" + std::to_string(i) + R"("})")));
  }
  ASSERT_TRUE(Eventually(
      [&] { return Counter(ep, "sluice_orchestrator_jobs_submitted_total") == 201; }, 10s));
  const auto worst = SlowestHealthProbe(ep, 50);
  std::printf("healthz slowest of 50 probes with 2,700 connections open: %.2f ms\n",
              static_cast<double>(worst.count()) / 1000.0);
  EXPECT_LT(worst, 100ms);

  // The waiting clients leave: their jobs are cancelled, never run.
  waiting.clear();
  ASSERT_TRUE(Eventually(
      [&] { return Counter(ep, "sluice_orchestrator_jobs_cancelled_total") == 200; }, 10s));
  Workers("0.01");
  const Reply fresh = Call(ep, Post("/v1/images/generations", R"({"prompt":"a new one"})"));
  EXPECT_EQ(fresh.status, 200) << fresh.body;
  // Every stream sees the watched job through to its end event.
  for (auto& s : streams) {
    const std::string rest = s->ReadUntil("event: end\n");
    ASSERT_NE(rest, "");
    EXPECT_NE(rest.find("event: done"), std::string::npos);
  }
  EXPECT_EQ(Counter(ep, "sluice_orchestrator_jobs_succeeded_total"), 2);
  EXPECT_EQ(Counter(ep, "sluice_orchestrator_jobs_cancelled_total"), 200);
  // The idle connections are still served.
  ASSERT_TRUE(idle[1234]->Send(Get("/healthz")));
  EXPECT_EQ(idle[1234]->Read().status, 200);
}

TEST_F(HttpFrontTest, CraftedRequestsAreRefusedAndTheServerGoesOn) {
  auto orch = Orchestrator({"--http-request-timeout-ms", "500"});
  const std::string ep = orch->Word(3);
  // A 200 KB body nesting arrays 100,000 deep used to overflow the stack.
  const std::string deep =
      R"({"prompt":"x","user":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  Reply r = Call(ep, Post("/v1/images/generations", deep));
  EXPECT_EQ(r.status, 400);
  const json e = json::parse(r.body)["error"];
  EXPECT_NE(e["message"].get<std::string>().find("nested deeper than 32"), std::string::npos);
  EXPECT_EQ(e["param"], "body");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_TRUE(e.contains("code"));
  // A 50 MB body is refused from its Content-Length, before it is sent.
  {
    Conn c(ep);
    ASSERT_TRUE(c.Send("POST /v1/videos HTTP/1.1\r\nHost: t\r\nContent-Length: 52428800\r\n\r\n"));
    EXPECT_EQ(c.Read().status, 413);
  }
  r = Call(ep,
           "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Pad: " + std::string(20000, 'p') + "\r\n\r\n");
  EXPECT_EQ(r.status, 431);
  r = Call(ep, Get("/v1/nothing-here"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "not_found");
  r = Call(ep, "PUT /v1/images/generations HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(r.status, 405);
  EXPECT_NE(r.head.find("Allow: POST"), std::string::npos);
  // Clients trickling headers are dropped and hold nobody else up.
  std::vector<std::unique_ptr<Conn>> slow;
  for (int i = 0; i < 50; ++i) {
    slow.push_back(std::make_unique<Conn>(ep, 5s));
    ASSERT_TRUE(slow.back()->Send("POST /v1/images/generations HTTP/1.1\r\nHost: t\r\nX-"));
  }
  EXPECT_LT(SlowestHealthProbe(ep, 10), 100ms);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& s : slow) {
    EXPECT_TRUE(s->ClosedByServer());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(Call(ep, Get("/healthz")).status, 200);
  r = Call(ep, Get("/readyz"));
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("no registered worker for sluice-reference/encode, "
                        "sluice-reference/denoise, sluice-reference/decode"),
            std::string::npos)
      << r.body;
}

TEST_F(HttpFrontTest, GenerateShowsProgressAndCancelsItsJobOnCtrlCAndAtItsTimeout) {
  StartCluster();
  Workers("0.3");  // 100 steps: about 4 s of denoise.
  const std::string ep = orch_->Word(3);
  const std::string out = ::testing::TempDir() + "/generate-cancelled.png";
  auto generate = [&](const std::string& timeout) {
    return std::make_unique<ChildProcess>(
        std::vector<std::string>{SLUICE_BIN, "generate", "--server", ep, "--prompt", "a slow one",
                                 "--steps", "100", "--timeout", timeout, "-o", out});
  };
  auto status_of = [&](const std::string& id) {
    return json::parse(Call(ep, Get("/v1/jobs/" + id)).body)["status"].get<std::string>();
  };
  {
    auto g = generate("60");
    // Its first progress line (stdout is a pipe: plain lines) names the job.
    const std::string id = g->Word(0);
    ASSERT_EQ(id.rfind("job-", 0), 0u) << g->banner();
    EXPECT_EQ(id.size(), 4u + 32u) << "128 random bits in hex";
    ASSERT_TRUE(Eventually([&] { return status_of(id) == "running"; }, 10s));
    g->Signal(SIGINT);
    const int st = g->Wait(10000);
    ASSERT_TRUE(WIFEXITED(st)) << st;
    EXPECT_EQ(WEXITSTATUS(st), 130);
    EXPECT_EQ(status_of(id), "cancelled");
  }
  {
    auto g = generate("1");
    const std::string id = g->Word(0);
    const int st = g->Wait(15000);
    ASSERT_TRUE(WIFEXITED(st)) << st;
    EXPECT_EQ(WEXITSTATUS(st), 1);
    EXPECT_EQ(status_of(id), "cancelled");
  }
}

TEST_F(HttpFrontTest, ASecondOrchestratorOnTakenPortsExitsNonZero) {
  auto first = Orchestrator({});
  for (const std::string& flag : {std::string("--listen"), std::string("--http")}) {
    const std::string taken = flag == "--listen" ? first->Word(2) : first->Word(3);
    ChildProcess second({SLUICE_BIN, "orchestrator", "--listen",
                         flag == "--listen" ? taken : "127.0.0.1:0", "--http",
                         flag == "--http" ? taken : "127.0.0.1:0", "--exit-on-stdin-eof"});
    EXPECT_EQ(second.banner().find("READY"), std::string::npos) << second.banner();
    const int status = second.Wait(10000);
    ASSERT_NE(status, -1) << flag << ": still running";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << flag;
  }
  EXPECT_EQ(Call(first->Word(3), Get("/healthz")).status, 200);
  // The store master's gRPC port alike.
  ChildProcess master({SLUICE_BIN, "master", "--listen", "127.0.0.1:0", "--exit-on-stdin-eof"});
  ASSERT_EQ(master.Word(1), "master") << master.banner();
  ChildProcess again({SLUICE_BIN, "master", "--listen", master.Word(2), "--exit-on-stdin-eof"});
  EXPECT_EQ(again.banner().find("READY"), std::string::npos) << again.banner();
  const int status = again.Wait(10000);
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

// Two models served at once, each by its own workers: the reference
// model (real PNGs) and the flux-1024 profile (1 MiB of one byte per job).
// Every job's bytes show which pool ran it; a model nobody serves is 404.
TEST_F(HttpFrontTest, TwoModelsServedAtOnceEachJobOnItsOwnModelsWorkers) {
  StartCluster("sluice-reference");
  const std::string ep = orch_->Word(3);
  Workers("0.01");
  ReferenceWorkers();
  ASSERT_TRUE(Eventually(
      [&] {
        const Reply r = Call(ep, Get("/readyz"));
        return r.status == 200 && r.body.find("flux-1024") != std::string::npos;
      },
      20s));
  const json models = json::parse(Call(ep, Get("/v1/models")).body);
  ASSERT_EQ(models["object"], "list");
  std::map<std::string, json> by_id;
  for (const json& m : models["data"]) {
    by_id[m["id"]] = m;
  }
  ASSERT_EQ(by_id.size(), 2u) << models.dump();
  EXPECT_EQ(by_id["flux-1024"]["object"], "model");
  EXPECT_EQ(by_id["flux-1024"]["ready"], true);
  EXPECT_EQ(by_id["flux-1024"]["stages"][1]["kind"], "admission");
  EXPECT_EQ(by_id["sluice-reference"]["default"], true);
  EXPECT_EQ(Call(ep, Get("/v1/models/flux-1024")).status, 200);

  std::vector<std::pair<std::string, bool>> jobs;  // (id, flux?)
  for (int i = 0; i < 6; ++i) {
    const bool flux = i % 2 == 0;
    json body = {{"async", true}, {"steps", 4}, {"prompt", "model " + std::to_string(i)}};
    if (flux) {
      body["model"] = "flux-1024";
    }
    const Reply r = Call(ep, Post("/v1/images/generations", body.dump()));
    ASSERT_EQ(r.status, 202) << r.body;
    const json j = json::parse(r.body);
    EXPECT_EQ(j["model"], flux ? "flux-1024" : "sluice-reference");
    jobs.emplace_back(j["id"], flux);
  }
  for (const auto& [id, flux] : jobs) {
    ASSERT_TRUE(Eventually(
        [&] {
          const Reply r = Call(ep, Get("/v1/jobs/" + id));
          return r.status == 200 && json::parse(r.body)["status"] != "queued" &&
                 json::parse(r.body)["status"] != "running";
        },
        60s));
    const Reply content = Call(ep, Get("/v1/jobs/" + id + "/content"));
    ASSERT_EQ(content.status, 200) << id << " " << content.body.substr(0, 200);
    if (flux) {
      EXPECT_EQ(content.body.size(), 1024u * 1024) << "flux-1024's profile decode made it";
    } else {
      EXPECT_EQ(content.body.rfind("\x89PNG", 0), 0u) << "the reference decode made it";
    }
  }

  const Reply missing =
      Call(ep, Post("/v1/images/generations", R"({"prompt":"x","model":"no-such-model"})"));
  EXPECT_EQ(missing.status, 404) << missing.body;
  const json e = json::parse(missing.body)["error"];
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_EQ(e["param"], "model");
  EXPECT_EQ(Call(ep, Get("/v1/models/no-such-model")).status, 404);
  EXPECT_EQ(Counter(ep, "sluice_orchestrator_jobs_succeeded_total"), 6);
}

}  // namespace
}  // namespace sluice::testing
