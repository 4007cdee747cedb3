// Affinity: a free worker carrying a job's label (registered, or learned
// as it ran the job's adapter) is preferred over the freest one; a
// batching worker fills with jobs of its batch key.
#include "orchestrator/core/scheduler_test_fixture.h"

namespace sluice::orchestrator {
namespace {

using namespace scheduler_testing;

TEST_P(SchedulerTest, AffinityPrefersTheWorkerNextToThePayload) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1, {"node=a"}), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("encode", 4, {"node=b"}), now_).ok());
  JobSpec near = Job(1);
  near.affinity = "node=a";
  ASSERT_TRUE(s_.Submit(near, now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{1, 1}}));
  JobSpec again = Job(2);
  again.affinity = "node=a";  // Its node is busy: any free worker will do.
  ASSERT_TRUE(s_.Submit(again, now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{2, 2}}));
}

// A label learned at run time (a LoRA adapter a worker loaded) draws the
// jobs naming it to that worker, as a registered one does; a worker keeps
// the newest kMaxLearnedLabels, forgets older ones, and a rejoin forgets
// them all.
TEST_P(SchedulerTest, ALearnedLabelDrawsJobsToItsWorker) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("encode", 4), now_).ok());
  JobSpec first = Job(1);
  first.affinity = "adapter=a";
  ASSERT_TRUE(s_.Submit(first, now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{1, 2}})) << "the freest";
  ASSERT_TRUE(s_.StageDone(1, 2, now_).ok());
  s_.TakeActions();
  ASSERT_TRUE(s_.LearnLabel(1, "adapter=a").ok());
  JobSpec second = Job(2);
  second.affinity = "adapter=a";
  ASSERT_TRUE(s_.Submit(second, now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{2, 1}}))
      << "the worker holding the adapter, though another is freer";
  ASSERT_TRUE(s_.StageDone(2, 1, now_).ok());
  s_.TakeActions();
  for (std::size_t k = 0; k < Scheduler::kMaxLearnedLabels; ++k) {
    ASSERT_TRUE(s_.LearnLabel(1, "adapter=x" + std::to_string(k)).ok());
  }
  JobSpec third = Job(3);
  third.affinity = "adapter=a";
  ASSERT_TRUE(s_.Submit(third, now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{3, 2}}))
      << "forgotten after kMaxLearnedLabels newer ones";
  ASSERT_TRUE(s_.StageDone(3, 2, now_).ok());
  s_.TakeActions();
  JobSpec fourth = Job(4);
  fourth.affinity = "adapter=x0";
  ASSERT_TRUE(s_.Submit(fourth, now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{4, 1}}));
  ASSERT_TRUE(s_.StageDone(4, 1, now_).ok());
  s_.TakeActions();
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());  // Rejoins: a new process.
  JobSpec fifth = Job(5);
  fifth.affinity = "adapter=x0";
  ASSERT_TRUE(s_.Submit(fifth, now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{5, 2}}));
  EXPECT_EQ(s_.LearnLabel(99, "adapter=a").code(), StatusCode::kNotFound);
}

// What a worker says it holds replaces what dispatches taught: a dropped
// adapter no longer draws jobs, a reported one does; registered labels
// stay; at most kMaxLearnedLabels, the newest.
TEST_P(SchedulerTest, WhatAWorkerSaysItHoldsReplacesWhatItLearned) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1, {"node=a"}), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("encode", 4), now_).ok());
  ASSERT_TRUE(s_.LearnLabel(1, "adapter=a").ok());
  ASSERT_TRUE(s_.SetLearnedLabels(1, {"adapter=b"}).ok());  // It dropped a, loaded b.
  using D = std::vector<std::pair<JobId, WorkerId>>;
  auto run = [&](JobId id, const std::string& affinity) {
    JobSpec j = Job(id);
    j.affinity = affinity;
    EXPECT_TRUE(s_.Submit(j, now_).ok());
    D d = Dispatched();
    for (const auto& [job, worker] : d) {
      EXPECT_TRUE(s_.StageDone(job, worker, now_).ok());
    }
    s_.TakeActions();
    return d;
  };
  EXPECT_EQ(run(1, "adapter=a"), (D{{1, 2}})) << "a was dropped: the freest";
  EXPECT_EQ(run(2, "adapter=b"), (D{{2, 1}}));
  EXPECT_EQ(run(3, "node=a"), (D{{3, 1}})) << "a registered label stays";
  ASSERT_TRUE(s_.SetLearnedLabels(1, {}).ok());
  EXPECT_EQ(run(4, "adapter=b"), (D{{4, 2}})) << "it holds nothing now";
  EXPECT_EQ(run(5, "node=a"), (D{{5, 1}}));
  std::vector<std::string> many;
  for (std::size_t k = 0; k <= Scheduler::kMaxLearnedLabels; ++k) {
    many.push_back("adapter=n" + std::to_string(k));  // Newest first.
  }
  ASSERT_TRUE(s_.SetLearnedLabels(1, many).ok());
  EXPECT_EQ(run(6, "adapter=n0"), (D{{6, 1}}));
  EXPECT_EQ(run(7, "adapter=n" + std::to_string(Scheduler::kMaxLearnedLabels)), (D{{7, 2}}))
      << "the oldest beyond kMaxLearnedLabels is not kept";
  EXPECT_EQ(s_.SetLearnedLabels(99, {}).code(), StatusCode::kNotFound);
}

// Batching workers fill with compatible jobs: an idle worker first (a
// batch of one), then, with none idle, the worker already running jobs of
// the job's batch key, though another is as free and registered first.
TEST_P(SchedulerTest, ABatchFillsWithJobsOfItsKeyOnceNoWorkerIsIdle) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 2), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("encode", 2), now_).ok());
  auto submit = [&](JobId id, const std::string& key) {
    JobSpec j = Job(id);
    j.batch_key = key;
    EXPECT_TRUE(s_.Submit(j, now_).ok());
    return Dispatched();
  };
  using D = std::vector<std::pair<JobId, WorkerId>>;
  EXPECT_EQ(submit(1, "128x128"), (D{{1, 1}}));
  EXPECT_EQ(submit(2, "256x256"), (D{{2, 2}})) << "an idle worker first";
  EXPECT_EQ(submit(3, "256x256"), (D{{3, 2}})) << "joins the batch of its key";
  EXPECT_EQ(submit(4, "64x64"), (D{{4, 1}})) << "no batch of its key: the freest";
  ASSERT_TRUE(s_.StageDone(1, 1, now_).ok());
  ASSERT_TRUE(s_.StageDone(2, 2, now_).ok());
  s_.TakeActions();
  EXPECT_EQ(submit(5, "256x256"), (D{{5, 2}})) << "job 3 still runs there";
  ASSERT_TRUE(s_.StageDone(5, 2, now_).ok());
  s_.TakeActions();
  EXPECT_EQ(submit(6, "64x64"), (D{{6, 1}})) << "as free as worker 2, and runs its key";
  JobSpec keyless = Job(7);
  ASSERT_TRUE(s_.Submit(keyless, now_).ok());
  EXPECT_EQ(Dispatched(), (D{{7, 2}})) << "no key: the freest";
}

}  // namespace
}  // namespace sluice::orchestrator
