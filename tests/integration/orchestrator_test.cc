// The orchestrator service end to end on loopback: fake stage workers over
// gRPC, clients over HTTP.
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/orchestrator/server.h"
#include "sluice/store/client.h"
#include "sluice/store/master.h"
#include "sluice/store/store_node.h"

#include "base64.h"
#include "common/testing/eventually.h"
#include "media/frames_archive.h"
#include "media/png.h"
#include "metrics_text.h"
#include "orchestrator/service/video_mux.h"
#include "orchestrator_fixture.h"
#include "proto/orchestrator/v1/orchestrator.grpc.pb.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using sluice::internal::Eventually;
namespace pb = ::sluice::orchestrator::v1;
using nlohmann::json;

// The result files in `dir` (names), sorted.
std::vector<std::string> ResultFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    out.push_back(it->path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(OrchestratorTest, ImageJobsRunThroughEveryStageSyncAsyncAndWithEvents) {
  Start();
  FakeWorker e(server_->endpoint(), "encode"), d(server_->endpoint(), "denoise"),
      v(server_->endpoint(), "decode");
  int status = 0;
  json sync = Post(R"({"prompt":"a red fox","size":"256x256","seed":7})", &status);
  ASSERT_EQ(status, 200) << sync.dump();
  EXPECT_EQ(Unbase64(sync["data"][0]["b64_json"]), "decode(denoise(encode(a red fox)))");

  json by_url = Post(R"({"prompt":"a grey fox","response_format":"url"})", &status);
  ASSERT_EQ(status, 200) << by_url.dump();
  const std::string url = by_url["data"][0]["url"];
  const std::string prefix = "http://" + server_->http_endpoint() + "/v1/jobs/job-";
  ASSERT_EQ(url.rfind(prefix, 0), 0u) << url;
  EXPECT_EQ(http_->Get(url.substr(url.find("/v1/")))->body, "decode(denoise(encode(a grey fox)))");

  json two = Post(R"({"prompt":"owl","n":2,"seed":3})", &status);
  ASSERT_EQ(status, 200) << two.dump();
  ASSERT_EQ(two["data"].size(), 2u);
  EXPECT_EQ(Unbase64(two["data"][1]["b64_json"]), "decode(denoise(encode(owl)))");

  json async = Post(R"({"prompt":"a lake","async":true,"priority":"interactive"})", &status);
  ASSERT_EQ(status, 202) << async.dump();
  const std::string id = async["id"];
  json done = WaitStatus(id, "succeeded");
  EXPECT_EQ(done["status"], "succeeded") << done.dump();
  auto events = http_->Get("/v1/jobs/" + id + "/events");
  ASSERT_TRUE(events);
  for (const char* want : {"event: queued", "event: stage_started", "event: step",
                           "event: stage_done", "event: done"}) {
    EXPECT_NE(events->body.find(want), std::string::npos) << want << "\n" << events->body;
  }
  auto m = http_->Get("/metrics");
  EXPECT_NE(m->body.find("sluice_orchestrator_jobs_succeeded_total 5"), std::string::npos)
      << m->body;
  EXPECT_NE(
      m->body.find("sluice_orchestrator_workers{model=\"sluice-reference\",stage=\"denoise\"} 1"),
      std::string::npos);
  EXPECT_EQ(http_->Get("/healthz")->status, 200);
}

TEST_F(OrchestratorTest, MalformedRequestsAre400NamingTheField) {
  Start();
  struct Case {
    const char* body;
    const char* field;
  };
  for (const Case& c :
       {Case{"not json", "body"}, Case{"{}", "prompt"}, Case{R"({"prompt":""})", "prompt"},
        Case{R"({"prompt":"x","size":"100x7"})", "size"},
        Case{R"({"prompt":"x","steps":0})", "steps"},
        Case{R"({"prompt":"x","priority":"urgent"})", "priority"},
        Case{R"({"prompt":"x","response_format":"png"})", "response_format"},
        Case{R"({"prompt":"x","colour":"red"})", "colour"}}) {
    int status = 0;
    json r = Post(c.body, &status);
    EXPECT_EQ(status, 400) << c.body;
    EXPECT_EQ(r["error"]["param"], c.field) << r.dump();
  }
  EXPECT_EQ(http_->Get("/v1/jobs/job-999")->status, 404);
  EXPECT_EQ(http_->Get("/v1/jobs/bogus")->status, 404);
  EXPECT_EQ(http_->Delete("/v1/jobs/job-999")->status, 404);
}

TEST_F(OrchestratorTest, FullQueueAnswers429WithRetryAfter) {
  Start(/*max_queued=*/2);
  int status = 0;
  for (int i = 0; i < 2; ++i) {
    Post(R"({"prompt":"x","async":true})", &status);
    EXPECT_EQ(status, 202);
  }
  auto r =
      http_->Post("/v1/images/generations", R"({"prompt":"x","async":true})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_NE(http_->Get("/metrics")->body.find("sluice_orchestrator_jobs_rejected_total 1"),
            std::string::npos);
}

TEST_F(OrchestratorTest, LostWorkerWorkIsRequeuedAndCancelStopsRunningWork) {
  Start();
  FakeWorker e(server_->endpoint(), "encode"), v(server_->endpoint(), "decode");
  auto stuck = std::make_unique<FakeWorker>(server_->endpoint(), "denoise", /*hold=*/true);
  int status = 0;
  const std::string id = Post(R"({"prompt":"p","async":true})", &status)["id"];
  ASSERT_EQ(status, 202);
  json j = WaitStatus(id, "running");
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (stuck->runs() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(stuck->runs(), 1);
  stuck->Kill();  // Silent from now on: lost after worker_timeout.
  FakeWorker d(server_->endpoint(), "denoise");
  EXPECT_EQ(WaitStatus(id, "succeeded")["status"], "succeeded") << "re-queued to the live worker";
  EXPECT_GE(d.runs(), 1);

  // Cancel while denoise holds the job: the worker is told to stop.
  FakeWorker hold(server_->endpoint(), "denoise", /*hold=*/true);
  d.Kill();
  const std::string id2 = Post(R"({"prompt":"q","async":true})", &status)["id"];
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (hold.runs() == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(hold.runs(), 1);
  auto del = http_->Delete("/v1/jobs/" + id2);
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200);
  EXPECT_EQ(json::parse(del->body)["status"], "cancelled");
  const auto stop_by = std::chrono::steady_clock::now() + 5s;
  while (hold.stops() == 0 && std::chrono::steady_clock::now() < stop_by) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GE(hold.stops(), 1);
}

// A video's progress comes from its model's declared stage kinds: the
// admission stage (denoise) spans 10..90 % by its steps.
TEST_F(OrchestratorTest, AVideosProgressFollowsItsStagesDeclaredKinds) {
  Start();
  // The decode pool must exist: denoise admits a job only with a slot
  // there for its output.
  FakeWorker e(server_->endpoint(), "encode"), v(server_->endpoint(), "decode");
  FakeWorker hold(server_->endpoint(), "denoise", /*hold=*/true);  // Step 4 of 10, then hangs.
  const std::string id = PostVideo(R"({"prompt":"waves","seconds":"2","size":"320x192"})");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitStep(id, 4));
  const json video = json::parse(http_->Get("/v1/videos/" + id)->body);
  EXPECT_EQ(video["status"], "in_progress") << video.dump();
  EXPECT_EQ(video["progress"], 10 + 80 * 4 / 10) << video.dump();
}

// Declared weights ("@N") replace the kinds' defaults in a job's progress:
// at step 4 of 10 of a loop weighing 5 of 10, after an encode weighing 1,
// a video is 30% done (42% with the default weights, above). The model's
// page shows each stage's weight.
TEST_F(OrchestratorTest, AVideosProgressFollowsItsModelsDeclaredWeights) {
  Start();
  const std::string pipeline = "encode@1,denoise:admission@5,decode@4";
  FakeWorker e(server_->endpoint(), "encode", false, nullptr, "wv", pipeline);
  FakeWorker v(server_->endpoint(), "decode", false, nullptr, "wv", pipeline);
  FakeWorker hold(server_->endpoint(), "denoise", /*hold=*/true, nullptr, "wv", pipeline);
  auto m = http_->Get("/v1/models/wv");
  ASSERT_EQ(m->status, 200) << m->body;
  const json stages = json::parse(m->body)["stages"];
  EXPECT_EQ(stages[0]["progress_weight"], 1) << stages.dump();
  EXPECT_EQ(stages[1]["progress_weight"], 5) << stages.dump();
  EXPECT_EQ(stages[2]["progress_weight"], 4) << stages.dump();
  const std::string id =
      PostVideo(R"({"prompt":"waves","model":"wv","seconds":"2","size":"320x192"})");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitStep(id, 4));
  const json video = json::parse(http_->Get("/v1/videos/" + id)->body);
  EXPECT_EQ(video["progress"], 30) << video.dump();
}

TEST_F(OrchestratorTest, VideoJobsReportTimeToFirstFrameAndServeTheirContent) {
  Start();
  FakeWorker e(server_->endpoint(), "encode"), d(server_->endpoint(), "denoise"),
      v(server_->endpoint(), "decode");
  auto r = http_->Post("/v1/videos", R"({"prompt":"waves","seconds":"2","size":"320x192"})",
                       "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json created = json::parse(r->body);
  EXPECT_EQ(created["object"], "video");
  const std::string id = created["id"];
  json j;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    j = json::parse(http_->Get("/v1/videos/" + id)->body);
    if (j["status"] == "completed") {
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(j["status"], "completed") << j.dump();
  EXPECT_EQ(j["progress"], 100);
  auto content = http_->Get("/v1/videos/" + id + "/content");
  ASSERT_TRUE(content);
  if (!orchestrator::FindFfmpeg().empty()) {
    EXPECT_EQ(content->get_header_value("Content-Type"), "video/mp4") << content->body;
    EXPECT_EQ(content->body.substr(4, 4), "ftyp") << "an MP4 from the decoded frames";
  } else {
    EXPECT_EQ(content->get_header_value("Content-Type"), "application/x-tar");
  }
  EXPECT_GE(json::parse(http_->Get("/v1/jobs/" + id)->body).value("ttff_ms", -1.0), 0.0);
  EXPECT_NE(http_->Get("/v1/jobs/" + id + "/events")->body.find("event: first_output"),
            std::string::npos);
  EXPECT_NE(http_->Get("/metrics")->body.find("sluice_orchestrator_ttff_seconds_count 1"),
            std::string::npos);
  EXPECT_EQ(
      http_->Post("/v1/videos", R"({"prompt":"x","seconds":"600"})", "application/json")->status,
      400);
}

// The race that left `sluice serve --demo` printing ttff_s -1 for a job: a
// first output reported in the heartbeat after the job's result was
// dropped, so the job had no TTFF, no first_output event, and was left out
// of the TTFF histogram (and of bench e2e's p99). Now a job that succeeds
// without one gets its latency as TTFF, with the event, and the late
// report is ignored.
TEST_F(OrchestratorTest, AFirstOutputReportedAfterTheResultStillGivesTheJobItsTtff) {
  Start();
  FakeWorker e(server_->endpoint(), "encode"), d(server_->endpoint(), "denoise"),
      v(server_->endpoint(), "decode");
  v.ReportFirstOutputAfterDone();
  const std::string id = PostVideo(R"({"prompt":"late","seconds":"2","size":"320x192"})");
  ASSERT_FALSE(id.empty());
  json j;
  ASSERT_TRUE(Eventually(
      [&] {
        j = json::parse(http_->Get("/v1/jobs/" + id)->body);
        return j.value("status", "") == "succeeded";
      },
      10s));
  const double ttff_ms = j.value("ttff_ms", -1.0);
  EXPECT_GE(ttff_ms, 0.0) << j.dump();
  const std::string events = http_->Get("/v1/jobs/" + id + "/events")->body;
  const std::size_t first = events.find("event: first_output"), done = events.find("event: done");
  ASSERT_NE(first, std::string::npos) << events;
  EXPECT_LT(first, done) << events;
  EXPECT_EQ(events.find("event: first_output", first + 1), std::string::npos)
      << "one first output, not two: " << events;
  EXPECT_NE(http_->Get("/metrics")->body.find("sluice_orchestrator_ttff_seconds_count 1"),
            std::string::npos);
}

// A stage's last progress and first output may ride on its Done (one round
// trip at a stage's end): both are applied before the stage is done, as a
// heartbeat's would be. Its timings show on its stage_done event, checked.
TEST_F(OrchestratorTest, ProgressFirstOutputAndTimingsCarriedByADoneAreApplied) {
  Start();
  FakeWorker e(server_->endpoint(), "encode"), d(server_->endpoint(), "denoise"),
      v(server_->endpoint(), "decode");
  d.ReportProgressInDone();
  auto r = http_->Post("/v1/images/generations", R"({"prompt":"carried","async":true})",
                       "application/json");
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->status == 200 || r->status == 202) << r->body;
  const std::string id = json::parse(r->body)["id"];
  ASSERT_TRUE(Eventually(
      [&] {
        return json::parse(http_->Get("/v1/jobs/" + id)->body).value("status", "") == "succeeded";
      },
      10s));
  // The events in order, as "type/stage/step".
  std::vector<std::string> seen;
  json timings;
  std::istringstream lines(http_->Get("/v1/jobs/" + id + "/events")->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: ", 0) == 0) {
      const json ev = json::parse(line.substr(6));
      if (ev.value("type", "") == "stage_done" && ev.value("stage", "") == "denoise") {
        timings = ev.value("timings_ms", json());
      }
      seen.push_back(ev.value("type", "") + "/" + ev.value("stage", "") + "/" +
                     std::to_string(ev.value("step", 0)));
    }
  }
  std::string all;
  for (const std::string& s : seen) {
    all += s + " ";
  }
  auto at = [&](const std::string& prefix) {
    return std::find_if(seen.begin(), seen.end(),
                        [&](const std::string& s) { return s.rfind(prefix, 0) == 0; }) -
           seen.begin();
  };
  const auto n = static_cast<std::ptrdiff_t>(seen.size());
  ASSERT_LT(at("step/denoise/5"), n) << "the step carried by Done: " << all;
  ASSERT_LT(at("first_output/"), n) << all;
  EXPECT_LT(at("step/denoise/5"), at("stage_done/denoise")) << all;
  EXPECT_LT(at("first_output/"), at("stage_done/denoise"))
      << "the first output carried by denoise's Done, not the fallback at the end: " << all;
  EXPECT_EQ(timings, json({{"input", 1.5}, {"run", 12.5}}))
      << "a bad name and a negative value are dropped";
}

TEST_F(OrchestratorTest, WithoutFfmpegVideoContentIsTheFramesArchive) {
  OrchestratorConfig c;
  c.heartbeat_interval = 100ms;
  c.worker_timeout = 1500ms;
  c.ffmpeg = "";
  c.check_outputs = false;  // The fake's 3 frames of 32x24 are not what the request asks.
  auto s = OrchestratorServer::Start(c);
  ASSERT_TRUE(s.ok());
  server_ = std::move(*s);
  http_ = std::make_unique<httplib::Client>("http://" + server_->http_endpoint());
  FakeWorker e(server_->endpoint(), "encode"), d(server_->endpoint(), "denoise"),
      v(server_->endpoint(), "decode");
  const std::string id =
      json::parse(http_->Post("/v1/videos", R"({"prompt":"w"})", "application/json")->body)["id"];
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (json::parse(http_->Get("/v1/videos/" + id)->body)["status"] != "completed" &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  auto content = http_->Get("/v1/videos/" + id + "/content");
  ASSERT_TRUE(content);
  EXPECT_EQ(content->get_header_value("Content-Type"), "application/x-tar");
  auto frames = media::ReadTar(content->body);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  EXPECT_EQ(frames->size(), 3u);
  EXPECT_EQ((*frames)[1], Png(32, 24, 90));
  EXPECT_FALSE(media::ReadTar(content->body.substr(0, 700)).ok()) << "truncated";
}

TEST_F(OrchestratorTest, RestartedOrchestratorFinishesEveryAcceptedJob) {
  const std::string journal =
      ::testing::TempDir() + "/sluice-journal-" + std::to_string(::getpid()) + ".db";
  std::remove(journal.c_str());
  Start(64, journal);
  const std::string grpc_ep = server_->endpoint(), http_ep = server_->http_endpoint();
  FakeWorker e(grpc_ep, "encode"), v(grpc_ep, "decode");
  auto stuck = std::make_unique<FakeWorker>(grpc_ep, "denoise", /*hold=*/true);
  std::vector<std::string> ids;
  int status = 0;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(
        Post(R"({"prompt":"j)" + std::to_string(i) + R"(","async":true})", &status)["id"]);
    ASSERT_EQ(status, 202);
  }
  WaitStatus(ids[0], "running");
  // Kill the orchestrator mid-run (jobs queued and running), start it again.
  http_.reset();
  server_.reset();
  stuck->Kill();
  Start(64, journal, grpc_ep, http_ep);
  FakeWorker d(server_->endpoint(), "denoise");
  for (const std::string& id : ids) {
    EXPECT_EQ(WaitStatus(id, "succeeded")["status"], "succeeded") << id;
  }
  EXPECT_NE(http_->Get("/metrics")->body.find("sluice_orchestrator_jobs_restored_total 3"),
            std::string::npos);
  std::remove(journal.c_str());
}

// Jobs that finished before a restart answer as they did: status 200 with
// their result, or their error (they answered 404 after a restart before).
TEST_F(OrchestratorTest, FinishedJobsStillAnswerAfterARestart) {
  const std::string journal =
      ::testing::TempDir() + "/sluice-finished-" + std::to_string(::getpid()) + ".db";
  std::remove(journal.c_str());
  Start(64, journal);
  const std::string grpc_ep = server_->endpoint(), http_ep = server_->http_endpoint();
  std::string done, cancelled;
  {
    FakeWorker e(grpc_ep, "encode"), d(grpc_ep, "denoise"), v(grpc_ep, "decode");
    int status = 0;
    done = Post(R"({"prompt":"kept","async":true})", &status)["id"];
    ASSERT_EQ(status, 202);
    EXPECT_EQ(WaitStatus(done, "succeeded")["status"], "succeeded");
    // A synchronous answer reads its result back from the result dir.
    const json sync = Post(R"({"prompt":"synced"})", &status);
    ASSERT_EQ(status, 200) << sync.dump();
    EXPECT_EQ(Unbase64(sync["data"][0]["b64_json"]), "decode(denoise(encode(synced)))");
  }
  int status = 0;
  cancelled = Post(R"({"prompt":"dropped","async":true})", &status)["id"];
  ASSERT_EQ(status, 202);
  ASSERT_TRUE(http_->Delete("/v1/jobs/" + cancelled));
  EXPECT_EQ(WaitStatus(cancelled, "cancelled")["status"], "cancelled");
  http_.reset();
  server_.reset();
  Start(64, journal, grpc_ep, http_ep);
  auto job = http_->Get("/v1/jobs/" + done);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->status, 200) << job->body;
  EXPECT_EQ(json::parse(job->body).value("status", ""), "succeeded");
  auto content = http_->Get("/v1/jobs/" + done + "/content");
  ASSERT_TRUE(content);
  EXPECT_EQ(content->status, 200);
  EXPECT_EQ(content->body, "decode(denoise(encode(kept)))");
  auto gone = http_->Get("/v1/jobs/" + cancelled);
  ASSERT_TRUE(gone);
  EXPECT_EQ(json::parse(gone->body).value("status", ""), "cancelled") << gone->body;
  // The result is a file beside the journal (the cancelled job has none),
  // and the journal's row holds no copy of it.
  const std::string results = journal + ".results";
  const std::vector<std::string> files = ResultFiles(results);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(FileBytes(results + "/" + files[0]), "decode(denoise(encode(kept)))");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(journal.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT SUM(LENGTH(bytes)) FROM results", -1, &q, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(q, 0), 0) << "no result bytes in the journal";
  sqlite3_finalize(q);
  sqlite3_close(db);
  http_.reset();
  server_.reset();
  // Past the retention window: forgotten, in memory, in the journal and in
  // the result dir.
  configure_ = [](OrchestratorConfig& c) { c.max_finished_jobs = 1; };
  Start(64, journal, grpc_ep, http_ep);
  EXPECT_EQ(http_->Get("/v1/jobs/" + done)->status, 404) << "only the newest one is kept";
  EXPECT_EQ(http_->Get("/v1/jobs/" + cancelled)->status, 200);
  EXPECT_TRUE(ResultFiles(results).empty()) << "the forgotten job's result file is removed";
  http_.reset();
  server_.reset();
  std::remove(journal.c_str());
  std::filesystem::remove_all(results);
}

// A journal written before results had their own files keeps the bytes in
// its rows: a restart moves them to the result dir and serves them. A result
// file deleted by hand answers 404 result_gone, and the server serves on.
TEST_F(OrchestratorTest, AnOlderJournalsResultsMoveToTheResultDirAndAMissingOneIs404) {
  const std::string journal =
      ::testing::TempDir() + "/sluice-migrate-" + std::to_string(::getpid()) + ".db";
  const std::string results =
      ::testing::TempDir() + "/sluice-migrate-results-" + std::to_string(::getpid());
  std::remove(journal.c_str());
  std::filesystem::remove_all(results);
  configure_ = [&](OrchestratorConfig& c) { c.result_dir = results; };
  Start(64, journal);
  const std::string grpc_ep = server_->endpoint(), http_ep = server_->http_endpoint();
  std::string a, b;
  {
    FakeWorker e(grpc_ep, "encode"), d(grpc_ep, "denoise"), v(grpc_ep, "decode");
    int status = 0;
    a = Post(R"({"prompt":"a","async":true})", &status)["id"];
    b = Post(R"({"prompt":"b","async":true})", &status)["id"];
    EXPECT_EQ(WaitStatus(a, "succeeded")["status"], "succeeded");
    EXPECT_EQ(WaitStatus(b, "succeeded")["status"], "succeeded");
  }
  http_.reset();
  server_.reset();
  ASSERT_EQ(ResultFiles(results).size(), 2u);
  // As an older version left it: job a's bytes in its row, no files.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(journal.c_str(), &db), SQLITE_OK);
  const std::string sql =
      "UPDATE results SET bytes = CAST('older bytes' AS BLOB) WHERE job_id = "
      "(SELECT id FROM jobs WHERE name = '" +
      a + "')";
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_changes(db), 1);
  sqlite3_close(db);
  std::filesystem::remove_all(results);

  Start(64, journal, grpc_ep, http_ep);
  auto content = http_->Get("/v1/jobs/" + a + "/content");
  ASSERT_TRUE(content);
  EXPECT_EQ(content->status, 200) << content->body;
  EXPECT_EQ(content->body, "older bytes");
  EXPECT_EQ(ResultFiles(results).size(), 1u) << "job a's bytes moved to the dir";
  auto lost = http_->Get("/v1/jobs/" + b + "/content");
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->status, 404) << lost->body;
  EXPECT_EQ(json::parse(lost->body)["error"].value("code", ""), "result_gone") << lost->body;
  EXPECT_EQ(json::parse(http_->Get("/v1/jobs/" + b)->body).value("status", ""), "succeeded");
  http_.reset();
  server_.reset();
  std::remove(journal.c_str());
  std::filesystem::remove_all(results);
}

// The steps a job kept for edit and resume survive an orchestrator restart
// (journaled as reported): a resume from one is accepted, a step not kept
// is refused listing the kept ones, and past the retention window (read
// at the restart) the resume answers that the checkpoint expired.
TEST_F(OrchestratorTest, KeptCheckpointStepsSurviveARestartOnTheJournal) {
  const std::string journal =
      ::testing::TempDir() + "/sluice-kept-" + std::to_string(::getpid()) + ".db";
  std::remove(journal.c_str());
  Start(64, journal);
  const std::string grpc_ep = server_->endpoint(), http_ep = server_->http_endpoint();
  std::string kept;
  {
    FakeWorker e(grpc_ep, "encode"), d(grpc_ep, "denoise"), v(grpc_ep, "decode");
    int status = 0;
    kept = Post(R"({"prompt":"edit me","seed":3,"keep_checkpoints":true,"async":true})",
                &status)["id"];
    ASSERT_EQ(status, 202);
    EXPECT_EQ(WaitStatus(kept, "succeeded")["status"], "succeeded");
  }
  http_.reset();
  server_.reset();

  Start(64, journal, grpc_ep, http_ep);
  {
    FakeWorker e(grpc_ep, "encode"), d(grpc_ep, "denoise"), v(grpc_ep, "decode");
    int status = 0;
    const json resumed = Post(R"({"prompt":"edited","seed":3,"async":true,"resume_from":{"job":")" +
                                  kept + R"(","step":4}})",
                              &status);
    ASSERT_EQ(status, 202) << resumed.dump();
    EXPECT_EQ(WaitStatus(resumed["id"], "succeeded")["status"], "succeeded");
    const json refused =
        Post(R"({"prompt":"edited","seed":3,"resume_from":{"job":")" + kept + R"(","step":3}})",
             &status);
    EXPECT_EQ(status, 400) << refused.dump();
    EXPECT_NE(refused.dump().find("kept: 2, 4"), std::string::npos) << refused.dump();
  }
  http_.reset();
  server_.reset();

  std::this_thread::sleep_for(1100ms);
  configure_ = [](OrchestratorConfig& c) { c.checkpoint_retention = std::chrono::seconds(1); };
  Start(64, journal, grpc_ep, http_ep);
  int status = 0;
  const json expired = Post(
      R"({"prompt":"edited","seed":3,"resume_from":{"job":")" + kept + R"(","step":2}})", &status);
  EXPECT_EQ(status, 404) << expired.dump();
  EXPECT_NE(expired.dump().find("expired"), std::string::npos) << expired.dump();
  http_.reset();
  server_.reset();
  std::remove(journal.c_str());
  std::filesystem::remove_all(journal + ".results");
}

// A worker that heartbeats but never finishes (no progress) loses the
// assignment when its lease lapses: the job completes on another worker,
// and the holder is told to stop.
TEST_F(OrchestratorTest, AWorkerHoldingAnAssignmentLosesItsLease) {
  configure_ = [](OrchestratorConfig& c) { c.assignment_timeout = 700ms; };
  Start();
  FakeWorker e(server_->endpoint(), "encode"), v(server_->endpoint(), "decode");
  auto holder = std::make_unique<FakeWorker>(server_->endpoint(), "denoise", /*hold=*/true);
  int status = 0;
  const std::string id = Post(R"({"prompt":"held","async":true})", &status)["id"];
  ASSERT_EQ(status, 202);
  // The holder has the denoise stage before a second denoise worker comes
  // (worker ids are random: which idle worker a stage goes to is not).
  ASSERT_TRUE(Eventually([&] { return holder->runs() >= 1; })) << "the holder got no work";
  FakeWorker d(server_->endpoint(), "denoise");
  EXPECT_EQ(WaitStatus(id, "succeeded")["status"], "succeeded");
  EXPECT_EQ(http_->Get("/v1/jobs/" + id + "/content")->body, "decode(denoise(encode(held)))");
  EXPECT_TRUE(Eventually([&] { return holder->stops() >= 1; })) << "the holder was told to stop";
  auto events = http_->Get("/v1/jobs/" + id + "/events");
  EXPECT_NE(events->body.find("event: lease_expired"), std::string::npos) << events->body;
}

// A worker returning a forged result (a 32-byte "PNG") never has it served:
// the stage runs again, and after max_bad_outputs the forger gets no work.
TEST_F(OrchestratorTest, AForgedResultIsRetriedElsewhereAndARepeatOffenderGetsNoWork) {
  configure_ = [](OrchestratorConfig& c) {
    c.check_outputs = true;
    c.max_bad_outputs = 2;
  };
  Start();
  FakeWorker e(server_->endpoint(), "encode"), d(server_->endpoint(), "denoise");
  FakeWorker forger(server_->endpoint(), "decode", false, nullptr, {}, {}, [](const json&) {
    return std::make_pair(std::string("\x89PNG\r\n\x1a\n") + std::string(24, 'x'),
                          std::string("image/png"));
  });
  int status = 0;
  const std::string id = Post(R"({"prompt":"forged","size":"64x64","async":true})", &status)["id"];
  ASSERT_EQ(status, 202);
  EXPECT_TRUE(Eventually([&] { return forger.runs() >= 2; }));
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(forger.runs(), 2) << "no further work after max_bad_outputs";
  const std::string waiting = json::parse(http_->Get("/v1/jobs/" + id)->body).value("status", "");
  EXPECT_TRUE(waiting == "queued" || waiting == "running") << "not served, not failed: " << waiting;
  // Its one decode worker quarantined, the model is not ready.
  auto ready = http_->Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503) << ready->body;

  // Its output is set before it registers: the waiting job goes to it at once.
  FakeWorker honest(server_->endpoint(), "decode", false, nullptr, {}, {}, [](const json& req) {
    EXPECT_EQ(req.value("size", ""), "64x64");
    return std::make_pair(Png(64, 64, 7), std::string("image/png"));
  });
  EXPECT_EQ(WaitStatus(id, "succeeded").value("status", ""), "succeeded");
  EXPECT_EQ(http_->Get("/v1/jobs/" + id + "/content")->body, Png(64, 64, 7));
  auto events = http_->Get("/v1/jobs/" + id + "/events");
  EXPECT_NE(events->body.find("event: bad_output"), std::string::npos) << events->body;
  EXPECT_NE(events->body.find("is not a PNG"), std::string::npos) << events->body;

  // A PNG of the wrong size is refused too, and the next job avoids the forger.
  honest.SetFinalOutput(
      [](const json&) { return std::make_pair(Png(32, 32, 7), std::string("image/png")); });
  const std::string small =
      Post(R"({"prompt":"small","size":"64x64","async":true})", &status)["id"];
  ASSERT_EQ(status, 202);
  EXPECT_TRUE(Eventually([&] { return honest.runs() >= 3; }));
  ASSERT_TRUE(http_->Delete("/v1/jobs/" + small));  // Ends its event stream.
  auto small_events = http_->Get("/v1/jobs/" + small + "/events");
  EXPECT_NE(small_events->body.find("is 32x32, the request asked for 64x64"), std::string::npos)
      << small_events->body;
  EXPECT_EQ(forger.runs(), 2);
}

// A model its workers declared (not the orchestrator) outlives a restart:
// the journal holds its declaration, so its jobs are taken back and new ones
// accepted before any of its workers returns.
TEST_F(OrchestratorTest, AWorkerDeclaredModelIsDeclaredAgainFromTheJournal) {
  const std::string journal =
      ::testing::TempDir() + "/sluice-journal-model-" + std::to_string(::getpid()) + ".db";
  std::remove(journal.c_str());
  Start(64, journal);
  const std::string grpc_ep = server_->endpoint(), http_ep = server_->http_endpoint();
  const std::string pipeline = "prep,denoise:admission";
  auto prep = std::make_unique<FakeWorker>(grpc_ep, "prep", false, nullptr, "m2", pipeline);
  auto stuck = std::make_unique<FakeWorker>(grpc_ep, "denoise", true, nullptr, "m2", pipeline);
  int status = 0;
  const std::string first = Post(R"({"prompt":"r","model":"m2","async":true})", &status)["id"];
  ASSERT_EQ(status, 202);
  WaitStatus(first, "running");
  http_.reset();
  server_.reset();
  prep->Kill();
  stuck->Kill();
  Start(64, journal, grpc_ep, http_ep);
  auto m = http_->Get("/v1/models/m2");
  ASSERT_EQ(m->status, 200) << m->body;
  EXPECT_EQ(json::parse(m->body)["stages"][1]["kind"], "admission");
  const std::string second = Post(R"({"prompt":"s","model":"m2","async":true})", &status)["id"];
  ASSERT_EQ(status, 202) << "declared again: its jobs queue for its workers";
  FakeWorker p2(server_->endpoint(), "prep", false, nullptr, "m2", pipeline);
  FakeWorker d2(server_->endpoint(), "denoise", false, nullptr, "m2", pipeline);
  for (const auto& [id, prompt] : {std::pair{first, "r"}, std::pair{second, "s"}}) {
    EXPECT_EQ(WaitStatus(id, "succeeded")["status"], "succeeded") << id;
    EXPECT_EQ(http_->Get("/v1/jobs/" + id + "/content")->body,
              "denoise(prep(" + std::string(prompt) + "))");
  }
  std::remove(journal.c_str());
}

TEST_F(OrchestratorTest, RestartedOrchestratorRunsAJobOnFromItsLastStageStillInTheStore) {
  InProcessStore st;
  ASSERT_EQ(st.Start(MasterConfig{}), "");
  const std::string journal =
      ::testing::TempDir() + "/sluice-journal-resume-" + std::to_string(::getpid()) + ".db";
  std::remove(journal.c_str());
  store_master_ = st.master->endpoint();
  Start(64, journal);
  const std::string grpc_ep = server_->endpoint(), http_ep = server_->http_endpoint();
  StoreClient* store = st.client.get();
  // Two payloads per encode: "job/P/encode" and "job/P/extra-N" (N counts
  // encodes, so a re-run writes a new one).
  std::atomic<int> encodes{0};
  auto encoder = [store, &encodes](std::uint64_t, const std::string& prompt) {
    const std::string key = "job/" + prompt + "/encode";
    const std::string extra = "job/" + prompt + "/extra-" + std::to_string(encodes++);
    std::vector<std::byte> v(4096, std::byte{7});
    (void)store->Remove(key);  // A re-run's own output replaces the first one.
    return store->Put(key, v).ok() && store->Put(extra, v).ok()
               ? std::vector<std::string>{key, extra}
               : std::vector<std::string>{};
  };
  FakeWorker e(grpc_ep, "encode", false, encoder), v(grpc_ep, "decode");
  auto stuck = std::make_unique<FakeWorker>(grpc_ep, "denoise", /*hold=*/true);
  int status = 0;
  const std::string kept = Post(R"({"prompt":"kept","async":true})", &status)["id"];
  ASSERT_EQ(status, 202);
  const std::string lost = Post(R"({"prompt":"lost","async":true})", &status)["id"];
  ASSERT_EQ(status, 202);
  // Both finished encode; the stuck denoise worker checkpointed step 4 of each.
  for (const std::string& id : {kept, lost}) {
    const auto by = std::chrono::steady_clock::now() + 10s;
    json j;
    do {
      std::this_thread::sleep_for(10ms);
      j = json::parse(http_->Get("/v1/jobs/" + id)->body);
    } while (j["progress"]["step"] != 4 && std::chrono::steady_clock::now() < by);
    ASSERT_EQ(j["progress"]["step"], 4) << j.dump();
  }
  EXPECT_EQ(e.runs(), 2);
  // The orchestrator dies; meanwhile one job's encode output leaves the store.
  http_.reset();
  server_.reset();
  stuck->Kill();
  ASSERT_TRUE(store->Remove("job/lost/encode").ok());
  Start(64, journal, grpc_ep, http_ep);
  FakeWorker d(server_->endpoint(), "denoise");
  for (const std::string& id : {kept, lost}) {
    EXPECT_EQ(WaitStatus(id, "succeeded")["status"], "succeeded") << id;
  }
  EXPECT_EQ(e.runs(), 3) << "only the job whose encode output was lost encodes again";
  // The detail of the job's first event of `type` (its event stream ends
  // with the job).
  auto detail = [&](const std::string& id, const std::string& type) {
    std::istringstream lines(http_->Get("/v1/jobs/" + id + "/events")->body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("data: ", 0) == 0) {
        const json ev = json::parse(line.substr(6));
        if (ev["type"] == type) {
          return ev.value("detail", "");
        }
      }
    }
    return std::string("no such event");
  };
  EXPECT_EQ(detail(kept, "queued"), "restored after encode at step 4");
  EXPECT_EQ(detail(kept, "stage_started"), "resumed from step 4");
  EXPECT_EQ(detail(lost, "queued"), "");
  EXPECT_EQ(http_->Get("/v1/jobs/" + kept + "/content")->body, "decode(denoise(encode(kept)))");
  // The lost job's other saved payload, which its re-run no longer reads,
  // is removed too (it stayed in the store for good before), and so is
  // everything of both jobs once they succeeded.
  EXPECT_TRUE(Eventually(
      [&] {
        for (int n = 0; n < 3; ++n) {
          for (const char* p : {"kept", "lost"}) {
            const std::string k = "job/" + std::string(p) + "/extra-" + std::to_string(n);
            if (*store->Exists(k)) {
              return false;
            }
          }
        }
        return !*store->Exists("job/kept/encode") && !*store->Exists("job/lost/encode");
      },
      10s))
      << "payloads left in the store";
  http_.reset();
  server_.reset();
  std::remove(journal.c_str());
}

TEST_F(OrchestratorTest, FloodedSubmissionsAre429AndTheQueueStaysBounded) {
  Start(/*max_queued=*/50);
  int accepted = 0, limited = 0;
  for (int i = 0; i < 500; ++i) {
    auto r =
        http_->Post("/v1/images/generations", R"({"prompt":"x","async":true})", "application/json");
    ASSERT_TRUE(r);
    accepted += r->status == 202 ? 1 : 0;
    limited += r->status == 429 ? 1 : 0;
  }
  EXPECT_EQ(accepted, 50);
  EXPECT_EQ(limited, 450);
  const std::string m = http_->Get("/metrics")->body;
  EXPECT_NE(m.find("sluice_orchestrator_queued{model=\"sluice-reference\",stage=\"encode\"} 50"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("sluice_orchestrator_jobs_rejected_total 450"), std::string::npos);
}

TEST_F(OrchestratorTest, CancelRemovesStorePayloadsAndALostPayloadRerunsItsProducer) {
  MasterConfig mc;
  mc.heartbeat_interval = 100ms;
  mc.node_timeout = 600ms;
  InProcessStore st;
  // The producer's rerun finds no node left and gives up in 2 s, not 30.
  st.master_retry = 2s;
  ASSERT_EQ(st.Start(mc), "");

  OrchestratorConfig c;
  c.heartbeat_interval = 100ms;
  c.worker_timeout = 1500ms;
  c.store_master = st.master->endpoint();
  auto s = OrchestratorServer::Start(c);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  server_ = std::move(*s);
  http_ = std::make_unique<httplib::Client>("http://" + server_->http_endpoint());
  // Encode stores its output; nothing runs denoise, so jobs wait there.
  StoreClient* store = st.client.get();
  FakeWorker e(server_->endpoint(), "encode", false, [store](std::uint64_t, const std::string& p) {
    const std::string key = "job/" + p + "/encode";
    std::vector<std::byte> v(4096, std::byte{7});
    if (!store->Put(key, v).ok()) {
      return std::vector<std::string>{};
    }
    return std::vector<std::string>{key};
  });
  int status = 0;
  const std::string a = Post(R"({"prompt":"a","async":true})", &status)["id"];
  const std::string key_a = "job/a/encode";
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!*store->Exists(key_a) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(*store->Exists(key_a));
  ASSERT_EQ(http_->Delete("/v1/jobs/" + a)->status, 200);
  const auto gone_by = std::chrono::steady_clock::now() + 5s;
  while (*store->Exists(key_a) && std::chrono::steady_clock::now() < gone_by) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(*store->Exists(key_a)) << "a cancelled job's payloads are removed";

  const std::string b = Post(R"({"prompt":"b","async":true})", &status)["id"];
  const std::string key_b = "job/b/encode";
  while (!*store->Exists(key_b) && std::chrono::steady_clock::now() < until + 5s) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(*store->Exists(key_b));
  EXPECT_EQ(e.runs(), 2);
  st.node.reset();  // The node holding job b's encode output dies.
  st.node_engine.reset();
  const auto rerun_by = std::chrono::steady_clock::now() + 10s;
  while (e.runs() < 3 && std::chrono::steady_clock::now() < rerun_by) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(e.runs(), 3) << "the lost payload's producer ran again";
  ASSERT_EQ(http_->Delete("/v1/jobs/" + b)->status, 200);  // Ends its event stream.
  auto events = http_->Get("/v1/jobs/" + b + "/events");
  ASSERT_TRUE(events);
  EXPECT_NE(events->body.find("event: payload_lost"), std::string::npos) << events->body;
  EXPECT_NE(http_->Get("/metrics")->body.find("sluice_orchestrator_payloads_lost_total 1"),
            std::string::npos);
  http_.reset();
  server_.reset();
}

}  // namespace
}  // namespace sluice::testing
