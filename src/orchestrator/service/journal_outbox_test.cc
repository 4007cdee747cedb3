// The journal outbox: writes in the order decided, a job's progress
// coalesced, its outcome's bytes copied; and the state writing it after
// its lock is released.
#include "orchestrator/service/journal_outbox.h"

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::orchestrator {
namespace {

using namespace std::chrono_literals;

// Records every write as "kind:job[:detail]"; fails the jobs in `fail`.
class RecordingJournal : public JobJournal {
 public:
  Status Add(JobId id, const JobRequest&, const std::vector<StageDecl>&) override {
    log.push_back("add:" + std::to_string(id));
    return Status::Ok();
  }
  Status SaveProgress(JobId id, const JobProgress& p) override {
    log.push_back("progress:" + std::to_string(id) + ":" + std::to_string(p.checkpoint_step));
    return Fails(id);
  }
  Status Finish(JobId id, const JobOutcome& o) override {
    log.push_back("finish:" + std::to_string(id) + ":" + std::string(o.result));
    if (on_finish) {
      on_finish();
    }
    return Fails(id);
  }
  Result<std::vector<JournaledJob>> Unfinished() override { return std::vector<JournaledJob>{}; }
  Result<std::vector<FinishedRecord>> Finished(std::size_t, std::int64_t) override {
    return std::vector<FinishedRecord>{};
  }
  Status Keep(const KeptCheckpoint& k) override {
    log.push_back("keep:" + std::to_string(k.job) + ":" + std::to_string(k.step));
    return Fails(k.job);
  }
  Result<std::vector<KeptCheckpoint>> Kept() override { return std::vector<KeptCheckpoint>{}; }
  Status Prune(std::size_t, std::int64_t, std::int64_t) override { return Status::Ok(); }
  Result<JobId> MaxId() override { return JobId{0}; }

  std::vector<std::string> log;
  std::vector<JobId> fail;
  std::function<void()> on_finish;

 private:
  Status Fails(JobId id) const {
    return std::find(fail.begin(), fail.end(), id) == fail.end()
               ? Status::Ok()
               : UnavailableError("journal: disk full writing job " + std::to_string(id),
                                  FailureScope::kRequest);
  }
};

JobProgress Step(int step) {
  JobProgress p;
  p.done = "encode";
  p.checkpoint_step = step;
  return p;
}

TEST(JournalOutboxTest, WritesKeepTheirOrderAndAJobsProgressIsCoalesced) {
  JournalOutbox box;
  EXPECT_FALSE(box.pending());
  box.SaveProgress(1, Step(2));
  box.Keep({1, 2, 1000});
  box.SaveProgress(2, Step(4));
  box.SaveProgress(1, Step(6));  // Replaces job 1's, where it stands.
  std::string result = "png bytes";
  JobOutcome o;
  o.status = JobStatus::kSucceeded;
  o.result = result;
  box.Finish(2, o);  // Job 2's queued progress goes: its outcome drops it.
  result.assign("overwritten");
  EXPECT_TRUE(box.pending());

  std::vector<JournalOutbox::Write> batch = box.Take();
  EXPECT_FALSE(box.pending());
  EXPECT_TRUE(box.Take().empty());
  RecordingJournal journal;
  EXPECT_EQ(JournalOutbox::Apply(batch, journal), 0);
  EXPECT_EQ(journal.log,
            (std::vector<std::string>{"progress:1:6", "keep:1:2", "finish:2:png bytes"}));
}

TEST(JournalOutboxTest, AFailedWriteIsCountedAndTheRestGoOn) {
  JournalOutbox box;
  box.SaveProgress(1, Step(1));
  box.SaveProgress(2, Step(1));
  box.Keep({3, 5, 1000});
  RecordingJournal journal;
  journal.fail = {1};
  std::vector<JournalOutbox::Write> batch = box.Take();
  EXPECT_EQ(JournalOutbox::Apply(batch, journal), 1);
  EXPECT_EQ(journal.log, (std::vector<std::string>{"progress:1:1", "progress:2:1", "keep:3:5"}));
}

// The state queues a finished job's outcome under its lock and writes it
// once the lock is released, before the call returns: the journal may
// call the state back (here: read the job) without waiting on it.
TEST(JournalOutboxTest, TheStateWritesItsJournalAfterReleasingItsLock) {
  RecordingJournal journal;
  ServiceOptions o;
  o.check_outputs = false;
  OrchestratorState state(std::move(o), &journal);
  OrchestratorState::Registration r;
  r.capacity = 1;
  std::vector<WorkerId> w;
  for (const char* stage : {"encode", "denoise", "decode"}) {
    r.stage = stage;
    Result<WorkerId> id = state.Register(r);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    w.push_back(*id);
    ASSERT_TRUE(state
                    .Attach(
                        *id, &w.back(), [](const AssignmentOrder&) {}, [] {})
                    .ok());
  }
  JobRequest req;
  req.request_json = R"({"prompt":"a red circle"})";
  Result<JobId> job = state.Submit(req);
  ASSERT_TRUE(job.ok()) << job.status().ToString();

  bool read_back = false;
  journal.on_finish = [&] {
    // Under the state's lock this would never return: give it 10 s.
    std::promise<bool> got;
    std::future<bool> f = got.get_future();
    std::thread([&state, &got, id = *job] { got.set_value(state.Get(id).has_value()); }).detach();
    read_back = f.wait_for(10s) == std::future_status::ready && f.get();
  };
  for (std::size_t i = 0; i < w.size(); ++i) {
    DoneReport d;
    d.worker = w[i];
    d.job = *job;
    d.output = i + 1 < w.size() ? "latent" : "the image";
    d.output_type = "image/png";
    ASSERT_TRUE(state.Done(d).ok()) << i;
  }
  ASSERT_FALSE(journal.log.empty());
  EXPECT_EQ(journal.log.back(), "finish:" + std::to_string(*job) + ":the image")
      << "written before Done returned";
  EXPECT_TRUE(read_back) << "the journal was written under the state's lock";
}

}  // namespace
}  // namespace sluice::orchestrator
