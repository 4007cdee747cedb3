// The orchestrator's state driven directly, on a fake clock: no gRPC, no
// HTTP, no threads, no sleeps. Each test moves the clock and calls the
// state as the service would (Register, Attach, Submit, Done, Tick).
#include "orchestrator/service/orchestrator_state.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "orchestrator/service/http_views.h"

namespace sluice::orchestrator {
namespace {

using namespace std::chrono_literals;
using Kind = AssignmentOrder::Kind;

class OrchestratorStateTest : public ::testing::Test {
 protected:
  OrchestratorStateTest() {
    ServiceOptions o;
    o.heartbeat_interval = 500ms;
    o.worker_timeout = 3000ms;
    o.check_outputs = false;  // The stages here return placeholder bytes.
    o.now = [this] { return now_; };
    o.unix_ms = [this] { return unix_ms_; };
    state_ = std::make_unique<OrchestratorState>(std::move(o));
  }

  // Moves both clocks on by `d`.
  void Advance(std::chrono::milliseconds d) {
    now_ += d;
    unix_ms_ += d.count();
  }

  // A registered worker of `stage` whose stream is attached: what it is
  // sent lands in sent_[its id], and lost_[its id] says whether its stream
  // was closed (it was declared lost).
  WorkerId Worker(const std::string& stage,
                  std::chrono::milliseconds lease = std::chrono::milliseconds(0),
                  int capacity = 1) {
    OrchestratorState::Registration r;
    r.stage = stage;
    r.capacity = capacity;
    r.assignment_timeout = lease;
    Result<WorkerId> w = state_->Register(r);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    const WorkerId id = w.ok() ? *w : 0;
    EXPECT_TRUE(state_
                    ->Attach(
                        id, &streams_[id],
                        [this, id](const AssignmentOrder& a) { sent_[id].push_back(a); },
                        [this, id] { lost_[id] = true; })
                    .ok());
    return id;
  }

  Status Done(WorkerId w, JobId job, const std::string& output,
              const std::vector<std::string>& keys = {}) {
    DoneReport d;
    d.worker = w;
    d.job = job;
    d.output = output;
    d.payload_keys = keys;
    d.output_type = "image/png";
    return state_->Done(d);
  }

  // A heartbeat of worker `w` with `free` of its one slot free.
  Status Heartbeat(WorkerId w, int free) {
    HeartbeatReport h;
    h.worker = w;
    h.free_slots = static_cast<std::uint32_t>(free);
    return state_->Heartbeat(h);
  }

  // Finishes `job`'s encode on `encode` and returns which of `denoisers`
  // was then sent its denoise (0: none).
  WorkerId DenoisedOn(WorkerId encode, JobId job, std::initializer_list<WorkerId> denoisers) {
    EXPECT_TRUE(Done(encode, job, "cond").ok());
    for (WorkerId w : denoisers) {
      for (const AssignmentOrder& a : sent_[w]) {
        if (a.job == job && a.kind == Kind::kRun) {
          return w;
        }
      }
    }
    return 0;
  }

  JobId Submit(const std::string& affinity = "", const std::string& batch_key = "") {
    JobRequest r;
    r.request_json = R"({"prompt":"a red circle"})";
    r.affinity = affinity;
    r.batch_key = batch_key;
    Result<JobId> id = state_->Submit(r);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : 0;
  }

  TimePoint now_ = TimePoint{} + 1000s;
  std::int64_t unix_ms_ = 1'790'000'000'000;
  std::unique_ptr<OrchestratorState> state_;
  std::map<WorkerId, int> streams_;  // Their addresses are the streams' identities.
  std::map<WorkerId, std::vector<AssignmentOrder>> sent_;
  std::map<WorkerId, bool> lost_;
};

// Every time a job shows comes from the fed clock: its events' offsets,
// its Unix times and the latency histogram are exact.
TEST_F(OrchestratorStateTest, AJobsTimesAreTheFedClocks) {
  const WorkerId e = Worker("encode"), d = Worker("denoise"), v = Worker("decode");
  const JobId job = Submit();
  ASSERT_EQ(sent_[e].size(), 1u);
  EXPECT_EQ(sent_[e][0].job, job);
  EXPECT_EQ(sent_[e][0].stage, "encode");
  Advance(10ms);
  ASSERT_TRUE(Done(e, job, "cond").ok());
  ASSERT_EQ(sent_[d].size(), 1u);
  EXPECT_EQ(sent_[d][0].input, "cond");
  Advance(100ms);
  ASSERT_TRUE(Done(d, job, "latent").ok());
  ASSERT_EQ(sent_[v].size(), 1u);
  Advance(20ms);
  ASSERT_TRUE(Done(v, job, "png").ok());

  const std::optional<JobView> view = state_->Get(job);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->status, JobStatus::kSucceeded);
  EXPECT_EQ(view->result, "png");
  EXPECT_EQ(view->created_unix_s, 1'790'000'000);
  EXPECT_EQ(view->finished_unix_s, 1'790'000'000);  // 130 ms later: the same second.
  std::map<std::string, double> stage_done;
  double done_ms = -1;
  for (const JobEvent& ev : view->events) {
    if (ev.type == "stage_done") {
      stage_done[ev.stage] = ev.t_ms;
    } else if (ev.type == "done") {
      done_ms = ev.t_ms;
    }
  }
  EXPECT_DOUBLE_EQ(stage_done["encode"], 10);
  EXPECT_DOUBLE_EQ(stage_done["denoise"], 110);
  EXPECT_DOUBLE_EQ(stage_done["decode"], 130);
  EXPECT_DOUBLE_EQ(done_ms, 130);
  // Each run order names the job as clients know it (workers' logs do),
  // and each stage_started event the worker it went to (the console's
  // timeline).
  EXPECT_EQ(sent_[e][0].job_name, view->name);
  EXPECT_EQ(sent_[v][0].job_name, view->name);
  EXPECT_TRUE(view->name.starts_with("job-")) << view->name;
  std::vector<std::uint64_t> started_on;
  for (const JobEvent& ev : view->events) {
    if (ev.type == "stage_started") {
      started_on.push_back(ev.worker);
    }
  }
  EXPECT_EQ(started_on, (std::vector<std::uint64_t>{e, d, v}));
  const ServiceStats stats = state_->Stats();
  EXPECT_EQ(stats.succeeded, 1u);
  EXPECT_EQ(stats.job_latency.count, 1u);
  EXPECT_DOUBLE_EQ(stats.job_latency.sum, 0.13);
  // Its bucket (0.1, 0.5] keeps it as the exemplar /metrics shows in
  // OpenMetrics; Prometheus text leaves exemplars out.
  EXPECT_EQ(stats.job_latency.exemplars[5].job, view->name);
  const std::string om = MetricsText(stats, /*openmetrics=*/true);
  EXPECT_NE(om.find("sluice_orchestrator_job_seconds_bucket{le=\"0.5\"} 1 # {job_id=\"" +
                    view->name + "\"} 0.13\n"),
            std::string::npos)
      << om;
  EXPECT_TRUE(om.ends_with("# EOF\n"));
  EXPECT_NE(om.find("# TYPE sluice_orchestrator_jobs_succeeded counter\n"
                    "sluice_orchestrator_jobs_succeeded_total 1\n"),
            std::string::npos)
      << om;
  const std::string text = MetricsText(stats);
  EXPECT_NE(text.find("sluice_orchestrator_job_seconds_bucket{le=\"0.5\"} 1\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("job_id"), std::string::npos);
}

// A worker silent past worker_timeout is lost at the next Tick, not
// before, and the stage it held runs on another worker of its pool.
TEST_F(OrchestratorStateTest, ASilentWorkerIsLostAtItsTimeoutAndItsStageRunsElsewhere) {
  const WorkerId first = Worker("encode"), d = Worker("denoise"), v = Worker("decode");
  const auto others_beat = [&] {
    ASSERT_TRUE(Heartbeat(d, 1).ok());
    ASSERT_TRUE(Heartbeat(v, 1).ok());
  };
  const JobId job = Submit();
  ASSERT_EQ(sent_[first].size(), 1u);
  Advance(2900ms);  // Silent, but within its timeout.
  others_beat();
  state_->Tick();
  EXPECT_FALSE(lost_[first]);
  ASSERT_TRUE(Heartbeat(first, 0).ok());  // Busy with the job's encode.
  Advance(2900ms);                        // 2.9 s after its heartbeat: still in time.
  others_beat();
  state_->Tick();
  EXPECT_FALSE(lost_[first]);
  Advance(200ms);  // 3.1 s.
  others_beat();
  state_->Tick();
  EXPECT_TRUE(lost_[first]);
  EXPECT_FALSE(lost_[d] || lost_[v]) << "the workers that kept beating stay";
  EXPECT_EQ(Heartbeat(first, 0).code(), StatusCode::kNotFound) << "a lost worker registers again";
  const WorkerId second = Worker("encode");
  ASSERT_EQ(sent_[second].size(), 1u) << "the job's encode runs again on the new worker";
  EXPECT_EQ(sent_[second][0].job, job);
  EXPECT_EQ(sent_[second][0].stage, "encode");
  EXPECT_FALSE(Done(first, job, "stale").ok()) << "the lost worker's report is refused";
  ASSERT_TRUE(Done(second, job, "cond").ok());
  ASSERT_EQ(sent_[d].size(), 1u);
  EXPECT_EQ(sent_[d][0].input, "cond");
  const std::optional<JobView> view = state_->Get(job);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->stage, "denoise");
}

// A job with a LoRA adapter teaches the workers it runs on that they hold
// it (kAdapterAffinity): the next job naming it goes to its denoise worker,
// not to the freest one.
TEST_F(OrchestratorStateTest, AnAdaptersJobsGoWhereItWasLoaded) {
  const WorkerId e = Worker("encode", 0ms, 3), d1 = Worker("denoise", 0ms, 1),
                 d2 = Worker("denoise", 0ms, 2), v = Worker("decode", 0ms, 6);
  (void)v;
  const std::string adapter = std::string(kAdapterAffinity) + "0123456789abcdef";
  auto denoised_on = [&](JobId job) { return DenoisedOn(e, job, {d1, d2}); };
  const JobId plain = Submit();
  EXPECT_EQ(denoised_on(plain), d2) << "the freest";
  const JobId first = Submit(adapter);
  EXPECT_EQ(denoised_on(first), d1) << "as free as d2 now; registered first";
  ASSERT_TRUE(Done(d2, plain, "latent").ok());
  ASSERT_TRUE(Done(d1, first, "latent").ok());
  const JobId second = Submit(adapter);
  EXPECT_EQ(denoised_on(second), d1) << "where the adapter was loaded, though d2 is freer";
  const JobId third = Submit();
  EXPECT_EQ(denoised_on(third), d2);
}

// A batching denoise worker (capacity 2) fills with jobs of the shape it
// runs once no denoise worker is idle, though another is as free and
// registered first.
TEST_F(OrchestratorStateTest, ABatchingWorkerFillsWithJobsOfItsShape) {
  const WorkerId e = Worker("encode", 0ms, 6), d1 = Worker("denoise", 0ms, 2),
                 d2 = Worker("denoise", 0ms, 2), v = Worker("decode", 0ms, 6);
  (void)v;
  auto denoised_on = [&](JobId job) { return DenoisedOn(e, job, {d1, d2}); };
  const std::string small = "size=128x128,frames=1,steps=12";
  const std::string large = "size=256x256,frames=1,steps=12";
  EXPECT_EQ(denoised_on(Submit("", small)), d1);
  EXPECT_EQ(denoised_on(Submit("", large)), d2) << "an idle worker first";
  EXPECT_EQ(denoised_on(Submit("", large)), d2) << "beside the job of its shape";
  EXPECT_EQ(denoised_on(Submit("", small)), d1);
}

// A worker's Done says what it holds now: an adapter it dropped stops
// drawing jobs to it, though the scheduler learned it at dispatch; a
// report without `held` changes nothing.
TEST_F(OrchestratorStateTest, ADoneSayingWhatTheWorkerHoldsReplacesWhatWasLearned) {
  const WorkerId e = Worker("encode", 0ms, 3), d1 = Worker("denoise", 0ms, 1),
                 d2 = Worker("denoise", 0ms, 2), v = Worker("decode", 0ms, 6);
  (void)v;
  const std::string a = std::string(kAdapterAffinity) + "0123456789abcdef";
  const std::string b = std::string(kAdapterAffinity) + "fedcba9876543210";
  auto denoised_on = [&](JobId job) { return DenoisedOn(e, job, {d1, d2}); };
  auto done_holding = [&](WorkerId w, JobId job, std::optional<std::vector<std::string>> held) {
    DoneReport r;
    r.worker = w;
    r.job = job;
    r.output = "latent";
    r.held = std::move(held);
    ASSERT_TRUE(state_->Done(r).ok());
  };
  const JobId plain = Submit();
  EXPECT_EQ(denoised_on(plain), d2);
  const JobId first = Submit(a);
  EXPECT_EQ(denoised_on(first), d1);
  done_holding(d2, plain, std::nullopt);
  done_holding(d1, first, std::vector<std::string>{a});
  const JobId second = Submit(a);
  EXPECT_EQ(denoised_on(second), d1) << "it holds a";
  done_holding(d1, second, std::vector<std::string>{b, std::string(200, 'x')});
  const JobId third = Submit(a);
  EXPECT_EQ(denoised_on(third), d2) << "d1 dropped a for b: the freest";
}

// A finished job answers for result_ttl (an hour by default) and is
// forgotten at the first Tick after: a test of real time could not wait.
TEST_F(OrchestratorStateTest, AFinishedJobIsForgottenOnceItsResultTtlPasses) {
  const WorkerId e = Worker("encode"), d = Worker("denoise"), v = Worker("decode");
  const JobId job = Submit();
  ASSERT_TRUE(Done(e, job, "cond").ok());
  ASSERT_TRUE(Done(d, job, "latent").ok());
  ASSERT_TRUE(Done(v, job, "png").ok());
  const auto beat = [&] {
    for (WorkerId w : {e, d, v}) {
      ASSERT_TRUE(Heartbeat(w, 1).ok());
    }
  };
  Advance(3599s);
  beat();
  state_->Tick();
  ASSERT_TRUE(state_->Get(job).has_value()) << "within its hour";
  EXPECT_EQ(state_->Get(job)->result, "png");
  Advance(2s);
  beat();
  state_->Tick();
  EXPECT_FALSE(state_->Get(job).has_value()) << "an hour and a second after it finished";
}

// A worker that heartbeats but reports no progress on its assignment for
// its lease loses that assignment: it is told to stop, and the stage runs
// on another worker of the pool; the job does not fail.
TEST_F(OrchestratorStateTest, AnAssignmentWithoutProgressForItsLeaseRunsElsewhere) {
  const WorkerId e = Worker("encode"), v = Worker("decode");
  const WorkerId stuck = Worker("denoise", 2000ms);
  const JobId job = Submit();
  ASSERT_TRUE(Done(e, job, "cond").ok());
  ASSERT_EQ(sent_[stuck].size(), 1u);
  EXPECT_EQ(sent_[stuck][0].kind, Kind::kRun);
  const WorkerId spare = Worker("denoise", 2000ms);
  EXPECT_TRUE(sent_[spare].empty());
  const auto beat = [&] {
    ASSERT_TRUE(Heartbeat(e, 1).ok());
    ASSERT_TRUE(Heartbeat(v, 1).ok());
    ASSERT_TRUE(Heartbeat(stuck, 0).ok());
    ASSERT_TRUE(Heartbeat(spare, 1).ok());
  };
  Advance(1900ms);
  beat();
  state_->Tick();
  EXPECT_EQ(sent_[stuck].size(), 1u) << "within its lease";
  EXPECT_TRUE(sent_[spare].empty());
  Advance(200ms);
  beat();
  state_->Tick();
  ASSERT_EQ(sent_[stuck].size(), 2u);
  EXPECT_EQ(sent_[stuck][1].kind, Kind::kStop);
  EXPECT_EQ(sent_[stuck][1].job, job);
  ASSERT_EQ(sent_[spare].size(), 1u) << "the stage runs on the other worker";
  EXPECT_EQ(sent_[spare][0].kind, Kind::kRun);
  EXPECT_EQ(sent_[spare][0].stage, "denoise");
  EXPECT_FALSE(lost_[stuck]) << "it kept beating: only the assignment lapsed";
  ASSERT_TRUE(Done(spare, job, "latent").ok());
  ASSERT_TRUE(Done(v, job, "png").ok());
  EXPECT_EQ(state_->Get(job)->status, JobStatus::kSucceeded);
}

// A stage's payloads are released for collection once the next stage is
// done with them, the last stage's with the job; a report nobody takes
// releases its own keys.
TEST_F(OrchestratorStateTest, EachStagesPayloadsAreReleasedOnceTheNextStageHasReadThem) {
  using Keys = std::vector<std::string>;
  const WorkerId e = Worker("encode"), d = Worker("denoise"), v = Worker("decode");
  const JobId job = Submit();
  ASSERT_TRUE(Done(e, job, "cond", {"k/e"}).ok());
  EXPECT_EQ(state_->TakeReleasedKeys(), Keys{}) << "denoise has yet to read them";
  ASSERT_TRUE(Done(d, job, "latent", {"k/d1", "k/d2"}).ok());
  EXPECT_EQ(state_->TakeReleasedKeys(), Keys{"k/e"});
  ASSERT_TRUE(Done(v, job, "png", {"k/v"}).ok());
  EXPECT_EQ(state_->TakeReleasedKeys(), (Keys{"k/d1", "k/d2", "k/v"}));
  EXPECT_FALSE(Done(e, job, "late", {"k/late"}).ok()) << "the job is over";
  EXPECT_EQ(state_->TakeReleasedKeys(), Keys{"k/late"});
}

// A lost payload is not released (there is nothing to remove): its stage
// runs again, and the new output's keys are released in their turn.
TEST_F(OrchestratorStateTest, ALostPayloadsStageRunsAgainAndItsNewKeysAreReleased) {
  using Keys = std::vector<std::string>;
  const WorkerId e = Worker("encode");
  Worker("decode");  // Denoise is admitted with a decode slot held.
  const JobId job = Submit();
  ASSERT_TRUE(Done(e, job, "cond", {"k/e1"}).ok());  // No denoise worker yet.
  state_->PayloadLost("k/e1");
  state_->PayloadLost("k/unknown");  // Nobody's: ignored.
  EXPECT_EQ(state_->TakeReleasedKeys(), Keys{});
  ASSERT_EQ(sent_[e].size(), 2u) << "encode runs again";
  ASSERT_TRUE(Done(e, job, "cond", {"k/e2"}).ok());
  const WorkerId d = Worker("denoise");
  ASSERT_EQ(sent_[d].size(), 1u);
  ASSERT_TRUE(Done(d, job, "latent", {"k/d"}).ok());
  EXPECT_EQ(state_->TakeReleasedKeys(), Keys{"k/e2"});
  ASSERT_TRUE(state_->Cancel(job).ok());
  EXPECT_EQ(state_->TakeReleasedKeys(), Keys{"k/d"}) << "a cancelled job's payloads go too";
}

}  // namespace
}  // namespace sluice::orchestrator
