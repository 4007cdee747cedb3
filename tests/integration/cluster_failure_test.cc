// Cluster mode under failure: every role as its own `sluice` process on
// loopback running the reference stages; workers are killed or told to
// drain mid-job, and every job must still finish with the right bytes.
#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "child_process.h"
#include "runtime/reference/pipeline.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

class Cluster {
 public:
  Cluster() {
    master_ = Spawn({"master", "--listen", "127.0.0.1:0"});
    node_ = Spawn({"store-node", "--master", master_->Word(2), "--memory", "256MiB"});
    orch_ =
        Spawn({"orchestrator", "--store-master", master_->Word(2), "--worker-timeout-ms", "1000"});
    http_ = std::make_unique<httplib::Client>("http://" + orch_->Word(3));
    http_->set_read_timeout(120, 0);
  }
  bool up() const {
    return master_->Word(1) == "master" && node_->Word(1) == "store-node" &&
           orch_->Word(1) == "orchestrator";
  }
  // A reference-stage worker; extra flags appended.
  ChildProcess& Worker(const std::string& stage, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"worker",       "--stage",  stage,           "--orchestrator",
                                     orch_->Word(2), "--master", master_->Word(2)};
    args.insert(args.end(), extra.begin(), extra.end());
    workers_.push_back(Spawn(args));
    EXPECT_EQ(workers_.back()->Word(1), "worker") << workers_.back()->banner();
    return *workers_.back();
  }
  std::string Submit(const json& body) {
    auto r = http_->Post("/v1/videos", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    return r ? json::parse(r->body).value("id", "") : "";
  }
  json Job(const std::string& id) {
    auto r = http_->Get("/v1/jobs/" + id);
    return r && r->status == 200 ? json::parse(r->body) : json::object();
  }
  // Polls until `pred(job)` holds; false after `within`.
  bool WaitFor(const std::string& id, const std::function<bool(const json&)>& pred,
               std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
      const json j = Job(id);
      if (!j.empty() && pred(j)) {
        return true;
      }
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  // Polls until the job ended (succeeded, failed or cancelled), 180 s at most.
  bool WaitFinished(const std::string& id) {
    return WaitFor(
        id, [](const json& j) { return j["status"] != "running" && j["status"] != "queued"; },
        180s);
  }
  std::string Content(const std::string& id) {
    auto r = http_->Get("/v1/jobs/" + id + "/content");
    return r && r->status == 200 ? r->body : "";
  }
  // The job's server-sent events (the stream ends with the job), in order.
  std::vector<json> Events(const std::string& id) {
    auto r = http_->Get("/v1/jobs/" + id + "/events");
    std::vector<json> out;
    std::istringstream lines(r ? r->body : "");
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("data: ", 0) == 0) {
        out.push_back(json::parse(line.substr(6)));
      }
    }
    return out;
  }

 private:
  static std::unique_ptr<ChildProcess> Spawn(std::vector<std::string> args) {
    args.insert(args.begin(), SLUICE_BIN);
    args.push_back("--exit-on-stdin-eof");
    return std::make_unique<ChildProcess>(args);
  }
  std::unique_ptr<ChildProcess> master_, node_, orch_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::unique_ptr<httplib::Client> http_;
};

// What the reference pipeline computes for `body` in one place.
std::string Expected(const json& body) {
  auto r = reference::ParseRequest(body.dump(), 12, 4.0f);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? reference::GenerateAll(*r)->first : "";
}

bool Succeeded(const json& j) {
  return j.value("status", "") == "succeeded";
}

TEST(ClusterFailureTest, DenoiseWorkerKilledMidJobResumesFromItsCheckpoint) {
  Cluster c;
  ASSERT_TRUE(c.up());
  c.Worker("encode");
  c.Worker("decode");
  // A checkpoint every step: several are written between two heartbeats,
  // so the one the orchestrator heard of is rarely the newest.
  ChildProcess& first = c.Worker("denoise", {"--checkpoint-every", "1"});
  const json body = {
      {"prompt", "surf at sunset"}, {"size", "256x128"}, {"frames", 5}, {"steps", 40}, {"seed", 5}};
  const std::string id = c.Submit(body);
  ASSERT_TRUE(c.WaitFor(
      id, [](const json& j) { return j["stage"] == "denoise" && j["progress"]["step"] >= 5; },
      120s));
  // Killed before its replacement starts: however fast the steps, the job
  // cannot finish on the first worker while the second one comes up.
  first.Kill();  // SIGKILL: no drain, no goodbye.
  c.Worker("denoise", {"--checkpoint-every", "2"});
  ASSERT_TRUE(c.WaitFinished(id));
  ASSERT_TRUE(Succeeded(c.Job(id))) << c.Job(id).dump();
  // The second dispatch resumed from a checkpoint (step >= 4), and the
  // next progress came from there, not from step 1.
  const std::vector<json> events = c.Events(id);
  int resumed = -1, next_step = -1;
  for (const json& e : events) {
    if (e.value("type", "") == "stage_started" &&
        e.value("detail", "").rfind("resumed from step ", 0) == 0) {
      resumed = std::stoi(e["detail"].get<std::string>().substr(18));
    } else if (resumed > 0 && next_step < 0 && e.value("type", "") == "step") {
      next_step = e["step"].get<int>();
    }
  }
  EXPECT_GE(resumed, 4) << json(events).dump();
  EXPECT_GT(next_step, resumed) << json(events).dump();
  // Resuming changed nothing: the bytes are the uninterrupted run's.
  EXPECT_EQ(c.Content(id), Expected(body));
}

TEST(ClusterFailureTest, DecodeWorkerKilledMidJobEveryJobStillCompletes) {
  Cluster c;
  ASSERT_TRUE(c.up());
  c.Worker("encode");
  c.Worker("denoise");
  ChildProcess& first = c.Worker("decode");
  std::vector<std::pair<std::string, json>> jobs;
  for (int i = 0; i < 3; ++i) {
    const json body = {{"prompt", "city lights " + std::to_string(i)},
                       {"size", "256x128"},
                       {"frames", 17},
                       {"steps", 1},
                       {"seed", i}};
    jobs.emplace_back(c.Submit(body), body);
  }
  ASSERT_TRUE(c.WaitFor(
      jobs[0].first, [](const json& j) { return j["stage"] == "decode"; }, 120s));
  first.Kill();  // Mid-decode; its replacement starts after.
  c.Worker("decode");
  for (const auto& [id, body] : jobs) {
    ASSERT_TRUE(c.WaitFinished(id));
    EXPECT_TRUE(Succeeded(c.Job(id))) << c.Job(id).dump();
  }
  EXPECT_EQ(c.Content(jobs[0].first), Expected(jobs[0].second));
}

TEST(ClusterFailureTest, SigtermOnAWorkerLosesNoJob) {
  Cluster c;
  ASSERT_TRUE(c.up());
  c.Worker("encode");
  c.Worker("decode");
  ChildProcess& first = c.Worker("denoise");
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(c.Submit({{"prompt", "drain " + std::to_string(i)},
                            {"size", "128x128"},
                            {"frames", 5},
                            {"steps", 12},
                            {"seed", i}}));
  }
  ASSERT_TRUE(c.WaitFor(
      ids[0], [](const json& j) { return j["stage"] == "denoise"; }, 120s));
  c.Worker("denoise");
  first.Signal(SIGTERM);  // Drains: finishes what it runs, takes nothing new.
  for (const std::string& id : ids) {
    ASSERT_TRUE(c.WaitFinished(id));
    EXPECT_TRUE(Succeeded(c.Job(id))) << c.Job(id).dump();
    // Nor is any denoised twice: the drained worker's last Done was heard
    // before it unregistered.
    const std::vector<json> events = c.Events(id);
    EXPECT_EQ(std::count_if(events.begin(), events.end(),
                            [](const json& e) {
                              return e.value("type", "") == "stage_started" &&
                                     e.value("stage", "") == "denoise";
                            }),
              1)
        << json(events).dump();
  }
  const int status = first.Wait(30000);
  ASSERT_NE(status, -1) << "the drained worker did not exit";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace sluice::testing
