#include "orchestrator/core/scheduler.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "orchestrator/core/scheduler_test_fixture.h"

namespace sluice::orchestrator {
namespace {

using namespace scheduler_testing;

INSTANTIATE_TEST_SUITE_P(Models, SchedulerTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "BesideAnotherModel" : "OneModel";
                         });

TEST_P(SchedulerTest, PriorityClassesThenSubmissionOrder) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(100), now_).ok());  // Occupies the worker.
  ASSERT_TRUE(s_.Submit(Job(3, PriorityClass::kBatch), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(2, PriorityClass::kStandard), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1, PriorityClass::kInteractive), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(4, PriorityClass::kInteractive), now_).ok());
  EXPECT_EQ(DispatchedJobs(), std::vector<JobId>{100});
  std::vector<JobId> order;
  for (JobId running : {100, 1, 4, 2}) {
    ASSERT_TRUE(s_.StageDone(running, 1, now_).ok());
    for (JobId j : DispatchedJobs()) {
      order.push_back(j);
    }
  }
  EXPECT_EQ(order, (std::vector<JobId>{1, 4, 2, 3}));
}

TEST_P(SchedulerTest, EarliestDeadlineFirstWithinAClass) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(100), now_).ok());
  JobSpec late = Job(1), early = Job(2), none = Job(3);
  late.deadline = now_ + 10s;
  early.deadline = now_ + 5s;
  ASSERT_TRUE(s_.Submit(none, now_).ok());
  ASSERT_TRUE(s_.Submit(late, now_).ok());
  ASSERT_TRUE(s_.Submit(early, now_).ok());
  Dispatched();
  std::vector<JobId> order;
  for (JobId running : {100, 2, 1}) {
    ASSERT_TRUE(s_.StageDone(running, 1, now_).ok());
    for (JobId j : DispatchedJobs()) {
      order.push_back(j);
    }
  }
  EXPECT_EQ(order, (std::vector<JobId>{2, 1, 3}));
}

TEST_P(SchedulerTest, AgingPromotesWaitingBatchWork) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(100), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1, PriorityClass::kBatch), now_).ok());
  now_ += 61s;  // Two aging steps of 30 s: batch now ranks as interactive.
  ASSERT_TRUE(s_.Submit(Job(2, PriorityClass::kInteractive), now_).ok());
  Dispatched();
  ASSERT_TRUE(s_.StageDone(100, 1, now_).ok());
  EXPECT_EQ(DispatchedJobs(), std::vector<JobId>{1}) << "the older, aged job goes first";
}

TEST_P(SchedulerTest, CreditsAreNeverOverdrawn) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 2), now_).ok());
  for (JobId j = 1; j <= 5; ++j) {
    ASSERT_TRUE(s_.Submit(Job(j), now_).ok());
  }
  EXPECT_EQ(Dispatched().size(), 2u);
  ASSERT_TRUE(s_.Credits(1, 10, now_).ok());
  EXPECT_TRUE(Dispatched().empty()) << "a report cannot raise credits above capacity";
  ASSERT_TRUE(s_.Credits(1, 0, now_).ok());
  ASSERT_TRUE(s_.StageDone(1, 1, now_).ok());
  EXPECT_EQ(Dispatched().size(), 1u);
  ASSERT_TRUE(s_.WorkerUp(2, W("encode", 3), now_).ok());
  EXPECT_EQ(Dispatched().size(), 2u) << "a new worker takes the rest";
  EXPECT_EQ(Queued("encode"), 0u);
}

TEST_P(SchedulerTest, FullDecodePoolHoldsDenoiseBack) {
  const std::vector<std::string> edv = {"encode", "denoise", "decode"};
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 4), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("denoise", 4), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(3, W("decode", 1), now_).ok());
  for (JobId j = 1; j <= 3; ++j) {
    ASSERT_TRUE(s_.Submit(Job(j, PriorityClass::kStandard, edv), now_).ok());
  }
  EXPECT_EQ(Dispatched().size(), 3u);  // Three encodes.
  for (JobId j = 1; j <= 3; ++j) {
    ASSERT_TRUE(s_.StageDone(j, 1, now_).ok());
  }
  auto d = Dispatched();
  ASSERT_EQ(d.size(), 1u) << "one decode slot: one denoise admitted";
  EXPECT_EQ(d[0], (std::pair<JobId, WorkerId>{1, 2}));
  EXPECT_EQ(s_.Stats().reserved, 1u);
  ASSERT_TRUE(s_.StageDone(1, 2, now_).ok());
  d = Dispatched();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], (std::pair<JobId, WorkerId>{1, 3})) << "its decode uses the reservation";
  EXPECT_EQ(Queued("denoise"), 2u) << "the decode pool is busy: denoise still waits";
  ASSERT_TRUE(s_.StageDone(1, 3, now_).ok());
  d = Dispatched();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], (std::pair<JobId, WorkerId>{2, 2}));
}

TEST_P(SchedulerTest, RequeuedDenoiseKeepsItsOwnDecodeReservation) {
  ASSERT_TRUE(s_.WorkerUp(1, W("denoise", 1), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("decode", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1, PriorityClass::kStandard, {"denoise", "decode"}), now_).ok());
  EXPECT_EQ(DispatchedJobs(), std::vector<JobId>{1});
  ASSERT_TRUE(s_.WorkerLost(1, now_).ok());
  ASSERT_TRUE(s_.WorkerUp(3, W("denoise", 1), now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{1, 3}}))
      << "its own reservation must not block it";
  EXPECT_EQ(s_.Stats().reserved, 1u);
}

// A job re-queued with its decode reservation behind a head that waits for
// decode room: the head waits for the reservation, the reservation for the
// head. The holder must go first (chaos_test_secure stalled on this: denoise
// queued, its workers free, nothing running).
TEST_P(SchedulerTest, AQueuedJobHoldingItsDecodeSlotIsNotStuckBehindTheHead) {
  ASSERT_TRUE(s_.WorkerUp(1, W("denoise", 1), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("decode", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1, PriorityClass::kStandard, {"denoise", "decode"}), now_).ok());
  EXPECT_EQ(DispatchedJobs(), std::vector<JobId>{1});
  ASSERT_TRUE(s_.WorkerLost(1, now_).ok());
  ASSERT_TRUE(s_.Submit(Job(2, PriorityClass::kInteractive, {"denoise", "decode"}), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(3, W("denoise", 1), now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{1, 3}}))
      << "the job holding the decode slot runs; the head cannot until it is free";
  ASSERT_TRUE(s_.StageDone(1, 3, now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{1, 2}}));
  ASSERT_TRUE(s_.StageDone(1, 2, now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{2, 3}}));
  EXPECT_EQ(s_.Stats().reserved, 1u);
}

// Several queued holders behind a blocked head go best class first, each
// once, and one cancelled while queued is forgotten (its job is gone: the
// scheduler must not hand it out or look it up).
TEST_P(SchedulerTest, QueuedHoldersGoBestClassFirstAndACancelledOneIsForgotten) {
  ASSERT_TRUE(s_.WorkerUp(2, W("decode", 3), now_).ok());
  const std::vector<std::string> pipeline = {"denoise", "decode"};
  const std::pair<JobId, PriorityClass> first[] = {
      {1, PriorityClass::kBatch}, {2, PriorityClass::kStandard}, {5, PriorityClass::kBatch}};
  for (const auto& [id, cls] : first) {
    ASSERT_TRUE(s_.WorkerUp(10 + id, W("denoise", 1), now_).ok());
    ASSERT_TRUE(s_.Submit(Job(id, cls, pipeline), now_).ok());
  }
  EXPECT_EQ(DispatchedJobs(), (std::vector<JobId>{1, 2, 5}));
  for (const auto& [id, cls] : first) {
    ASSERT_TRUE(s_.WorkerLost(10 + id, now_).ok());  // Re-queued, each with its decode slot.
  }
  EXPECT_EQ(s_.Stats().reserved, 3u);
  ASSERT_TRUE(s_.Submit(Job(3, PriorityClass::kInteractive, pipeline), now_).ok());
  ASSERT_TRUE(s_.Cancel(1, now_).ok());  // A queued holder: its slot is free again.
  EXPECT_EQ(s_.Stats().reserved, 2u);
  ASSERT_TRUE(s_.Submit(Job(4, PriorityClass::kInteractive, pipeline), now_).ok());
  Dispatched();
  ASSERT_TRUE(s_.WorkerUp(20, W("denoise", 1), now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{3, 20}}))
      << "the head, with the cancelled holder's slot";
  ASSERT_TRUE(s_.WorkerUp(21, W("denoise", 1), now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{2, 21}}))
      << "the head waits for decode room; the standard holder goes before the batch one";
  ASSERT_TRUE(s_.WorkerUp(22, W("denoise", 1), now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{5, 22}}));
  ASSERT_TRUE(s_.WorkerUp(23, W("denoise", 1), now_).ok());
  EXPECT_TRUE(Dispatched().empty()) << "no holder is left; the head still waits";
  EXPECT_EQ(s_.Stats().reserved, 3u);
}

TEST_P(SchedulerTest, LostWorkerItemsGoBackToTheHead) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(2), now_).ok());
  Dispatched();
  ASSERT_TRUE(s_.WorkerLost(1, now_).ok());
  EXPECT_EQ(s_.StageDone(1, 1, now_).code(), StatusCode::kNotFound) << "a lost worker's report";
  ASSERT_TRUE(s_.WorkerUp(2, W("encode", 1), now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{1, 2}}));
}

TEST_P(SchedulerTest, ByDefaultDenoiseRunsOnlyAsManyJobsAsDecodeHasSlots) {
  for (WorkerId w = 1; w <= 6; ++w) {
    ASSERT_TRUE(s_.WorkerUp(w, W("denoise", 1), now_).ok());
  }
  ASSERT_TRUE(s_.WorkerUp(10, W("decode", 1), now_).ok());
  for (JobId j = 1; j <= 6; ++j) {
    ASSERT_TRUE(s_.Submit(Job(j, PriorityClass::kStandard, {"denoise", "decode"}), now_).ok());
  }
  EXPECT_EQ(DispatchedJobs().size(), 1u) << "one decode slot: one denoise job at a time";
}

class OvercommitSchedulerTest : public SchedulerFixture {
 protected:
  static SchedulerOptions Opts() {
    SchedulerOptions o;
    o.admission_overcommit = 4;
    return o;
  }
  OvercommitSchedulerTest() : SchedulerFixture(Opts()) {}
};

TEST_F(OvercommitSchedulerTest, OneDecodeSlotServesSeveralDenoiseJobs) {
  for (WorkerId w = 1; w <= 6; ++w) {
    ASSERT_TRUE(s_.WorkerUp(w, W("denoise", 1), now_).ok());
  }
  ASSERT_TRUE(s_.WorkerUp(10, W("decode", 1), now_).ok());
  for (JobId j = 1; j <= 6; ++j) {
    ASSERT_TRUE(s_.Submit(Job(j, PriorityClass::kStandard, {"denoise", "decode"}), now_).ok());
  }
  EXPECT_EQ(DispatchedJobs().size(), 4u) << "4 reservations per decode slot";
  EXPECT_EQ(s_.Stats().reserved, 4u);
  // A job done with denoise moves to decode (its reservation used): one
  // more is admitted; the decode slot being busy does not matter.
  ASSERT_TRUE(s_.StageDone(1, 1, now_).ok());
  std::vector<std::pair<JobId, WorkerId>> next = Dispatched();
  EXPECT_EQ(next.size(), 2u) << "job 1 to decode, job 5 to denoise";
  // A second decode worker doubles the room; a lost one takes it back.
  ASSERT_TRUE(s_.WorkerUp(11, W("decode", 1), now_).ok());
  EXPECT_EQ(DispatchedJobs(), std::vector<JobId>{6});
  ASSERT_TRUE(s_.WorkerLost(11, now_).ok());
  ASSERT_TRUE(s_.Submit(Job(7, PriorityClass::kStandard, {"denoise", "decode"}), now_).ok());
  EXPECT_TRUE(DispatchedJobs().empty()) << "5 reserved, room for 4";
}

class RetrySchedulerTest : public SchedulerFixture {
 protected:
  static SchedulerOptions Opts() {
    SchedulerOptions o;
    o.max_attempts = 2;
    return o;
  }
  RetrySchedulerTest() : SchedulerFixture(Opts()) {}
};

TEST_F(RetrySchedulerTest, RetriesAreBoundedAndTheReasonKept) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1), now_).ok());
  Dispatched();
  ASSERT_TRUE(s_.StageFailed(1, 1, "CUDA OOM", true, now_).ok());
  EXPECT_EQ(DispatchedJobs(), std::vector<JobId>{1}) << "retried";
  ASSERT_TRUE(s_.StageFailed(1, 1, "CUDA OOM", true, now_).ok());
  bool failed = false;
  for (const Action& a : s_.TakeActions()) {
    if (a.kind == Kind::kJobFailed) {
      failed = true;
      EXPECT_NE(a.reason.find("CUDA OOM"), std::string::npos);
      EXPECT_NE(a.reason.find("2 attempt"), std::string::npos);
    }
  }
  EXPECT_TRUE(failed);
  ASSERT_TRUE(s_.Submit(Job(2), now_).ok());
  Dispatched();
  ASSERT_TRUE(s_.StageFailed(2, 1, "bad prompt", false, now_).ok());
  auto acts = s_.TakeActions();
  ASSERT_FALSE(acts.empty());
  EXPECT_EQ(acts[0].kind, Kind::kJobFailed) << "not retryable: fails at once";
}

// A retryable failure runs again only after its backoff, doubling per
// attempt; the worker serves other work meanwhile, and a job cancelled
// while it waits never runs again.
class BackoffSchedulerTest : public SchedulerFixture {
 protected:
  static SchedulerOptions Opts() {
    SchedulerOptions o;
    o.max_attempts = 3;
    o.retry_backoff = 1000ms;
    return o;
  }
  BackoffSchedulerTest() : SchedulerFixture(Opts()) {}
};

TEST_F(BackoffSchedulerTest, ARetryWaitsItsBackoffDoublingPerAttempt) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1), now_).ok());
  ASSERT_EQ(DispatchedJobs(), std::vector<JobId>{1});
  ASSERT_TRUE(s_.StageFailed(1, 1, "put: connection refused", true, now_).ok());
  EXPECT_TRUE(DispatchedJobs().empty()) << "not at once";
  ASSERT_TRUE(s_.Submit(Job(2), now_).ok());
  EXPECT_EQ(DispatchedJobs(), std::vector<JobId>{2}) << "the worker is free meanwhile";
  ASSERT_TRUE(s_.StageDone(2, 1, now_ + 10ms).ok());
  s_.Tick(now_ + 999ms);
  EXPECT_TRUE(DispatchedJobs().empty()) << "999 ms of 1000";
  s_.Tick(now_ + 1000ms);
  ASSERT_EQ(DispatchedJobs(), std::vector<JobId>{1}) << "the first retry after 1 s";

  const TimePoint second = now_ + 1500ms;
  ASSERT_TRUE(s_.StageFailed(1, 1, "put: connection refused", true, second).ok());
  s_.Tick(second + 1999ms);
  EXPECT_TRUE(DispatchedJobs().empty()) << "the second waits twice as long";
  s_.Tick(second + 2000ms);
  ASSERT_EQ(DispatchedJobs(), std::vector<JobId>{1});

  ASSERT_TRUE(s_.StageFailed(1, 1, "put: connection refused", true, second + 2500ms).ok());
  bool failed = false;
  for (const Action& a : s_.TakeActions()) {
    failed |= a.kind == Kind::kJobFailed && a.reason.find("3 attempt") != std::string::npos;
  }
  EXPECT_TRUE(failed) << "the last attempt's failure fails the job at once";
}

TEST_F(BackoffSchedulerTest, AJobCancelledDuringItsBackoffNeverRunsAgain) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1), now_).ok());
  Dispatched();
  ASSERT_TRUE(s_.StageFailed(1, 1, "out of memory", true, now_).ok());
  ASSERT_TRUE(s_.Cancel(1, now_ + 100ms).ok());
  s_.Tick(now_ + 5s);
  EXPECT_TRUE(DispatchedJobs().empty());
  EXPECT_EQ(s_.Stats().jobs, 0u);
  EXPECT_FALSE(s_.Cancel(1, now_ + 6s).ok()) << "gone";
}

TEST(SchedulerBackoffCapTest, TheBackoffIsCappedHoweverManyAttempts) {
  SchedulerOptions o;
  o.max_attempts = 10;
  o.retry_backoff = 20s;  // The third retry would wait 80 s uncapped.
  Scheduler s(o);
  Declared(s);
  TimePoint t = TimePoint{} + 1h;
  ASSERT_TRUE(s.WorkerUp(1, W("encode", 1), t).ok());
  JobSpec j;
  j.id = 1;
  j.model = kModel;
  j.pipeline = {"encode"};
  ASSERT_TRUE(s.Submit(j, t).ok());
  for (auto wait : {20s, 30s, 30s}) {
    s.TakeActions();
    ASSERT_TRUE(s.StageFailed(1, 1, "refused", true, t).ok());
    s.Tick(t + wait - 1ms);
    bool early = false;
    for (const Action& a : s.TakeActions()) {
      early |= a.kind == Kind::kDispatch;
    }
    EXPECT_FALSE(early) << "before " << wait.count() << " s";
    t += wait;
    s.Tick(t);
    bool ran = false;
    for (const Action& a : s.TakeActions()) {
      ran |= a.kind == Kind::kDispatch;
    }
    ASSERT_TRUE(ran) << "after " << wait.count() << " s";
  }
}

// A retryable failure (a worker out of memory) runs again on another free
// worker; with only the same one free, there.
TEST_P(SchedulerTest, ARetryRunsOnAnotherWorkerWhenOneIsFree) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("encode", 2), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1), now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{1, 2}})) << "the freest";
  ASSERT_TRUE(s_.StageFailed(1, 2, "out of memory", true, now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{1, 1}}))
      << "worker 2 is freer, but the job just failed there";
  ASSERT_TRUE(s_.StageFailed(1, 1, "out of memory", true, now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{1, 2}}));
}

// A worker that holds an assignment without progress loses it: the work
// goes to another worker (the holder is told to stop, its late report is
// stale), progress renews the lease, and lapses count as attempts.
TEST_P(SchedulerTest, AnAssignmentWithoutProgressLosesItsLease) {
  const auto lease = SchedulerOptions{}.assignment_timeout;
  ASSERT_TRUE(s_.WorkerUp(1, W("denoise", 1), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("denoise", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1, PriorityClass::kStandard, {"denoise"}), now_).ok());
  const auto first = Dispatched();
  ASSERT_EQ(first.size(), 1u);
  const WorkerId holder = first[0].second, other = holder == 1 ? 2 : 1;
  now_ += lease / 2;
  ASSERT_TRUE(s_.Progress(1, holder, 3, false, now_).ok());  // Renews.
  now_ += lease / 2 + 1ms;
  s_.Tick(now_);
  EXPECT_TRUE(s_.TakeActions().empty()) << "progress renewed the lease";
  now_ += lease;
  s_.Tick(now_);
  auto acts = s_.TakeActions();
  ASSERT_EQ(acts.size(), 2u);
  EXPECT_EQ(acts[0].kind, Kind::kStop);
  EXPECT_EQ(acts[0].worker, holder);
  EXPECT_EQ(acts[0].reason, "lease expired");
  EXPECT_EQ(acts[1].kind, Kind::kDispatch);
  EXPECT_EQ(acts[1].worker, other) << "another worker first";
  EXPECT_EQ(s_.StageDone(1, holder, now_).code(), StatusCode::kFailedPrecondition)
      << "the old holder's late report is stale";
  // Two more lapses: three attempts, the job fails.
  for (int lapse = 0; lapse < 2; ++lapse) {
    ASSERT_TRUE(s_.Credits(holder, 1, now_).ok());  // The old holder gave its slot up.
    now_ += lease + 1ms;
    s_.Tick(now_);
  }
  bool failed = false;
  for (const Action& a : s_.TakeActions()) {
    failed =
        failed || (a.kind == Kind::kJobFailed &&
                   a.reason.find("no progress within its lease 3 time(s)") != std::string::npos);
  }
  EXPECT_TRUE(failed);
  EXPECT_EQ(s_.Stats().jobs, 0u);
}

// A worker's own lease (its model's pace) replaces the default for its
// assignments only.
TEST_P(SchedulerTest, AWorkersDeclaredLeaseAppliesToItsAssignments) {
  WorkerSpec quick = W("denoise", 1);
  quick.assignment_timeout = 2s;
  ASSERT_TRUE(s_.WorkerUp(1, quick, now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1, PriorityClass::kStandard, {"denoise"}), now_).ok());
  ASSERT_EQ(Dispatched().size(), 1u);
  now_ += 1500ms;
  ASSERT_TRUE(s_.Progress(1, 1, 1, false, now_).ok());  // Renews for 2 s more.
  now_ += 1900ms;
  s_.Tick(now_);
  EXPECT_TRUE(s_.TakeActions().empty());
  now_ += 200ms;
  s_.Tick(now_);
  auto acts = s_.TakeActions();
  ASSERT_FALSE(acts.empty());
  EXPECT_EQ(acts[0].kind, Kind::kStop);
  EXPECT_EQ(acts[0].reason, "lease expired");

  // A worker declaring none gets the options' default (10 min): job 1,
  // re-queued, runs on it without a lapse.
  ASSERT_TRUE(s_.WorkerUp(2, W("denoise", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(2, PriorityClass::kStandard, {"denoise"}), now_).ok());
  (void)s_.TakeActions();
  now_ += 60s;
  s_.Tick(now_);
  for (const Action& a : s_.TakeActions()) {
    EXPECT_NE(a.reason, "lease expired") << "job " << a.job;
  }
}

TEST_P(SchedulerTest, CancelRemovesQueuedStopsRunningAndReleasesPayloads) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1, PriorityClass::kStandard, {"encode", "decode"}), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(2), now_).ok());
  Dispatched();
  ASSERT_TRUE(s_.Cancel(2, now_).ok());
  auto acts = s_.TakeActions();
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, Kind::kReleaseJob);
  ASSERT_TRUE(s_.Cancel(1, now_).ok());
  acts = s_.TakeActions();
  ASSERT_EQ(acts.size(), 2u);
  EXPECT_EQ(acts[0].kind, Kind::kReleaseJob);
  EXPECT_EQ(acts[1].kind, Kind::kStop);
  EXPECT_EQ(acts[1].worker, 1u);
  EXPECT_EQ(s_.Cancel(1, now_).code(), StatusCode::kNotFound);
  ASSERT_TRUE(s_.StageFailed(1, 1, "stopped", false, now_).ok());
  EXPECT_TRUE(s_.TakeActions().empty()) << "no decode, no done, no second failure";
  EXPECT_EQ(s_.Stats().jobs, 0u);
  ASSERT_TRUE(s_.Submit(Job(3), now_).ok());
  EXPECT_EQ(DispatchedJobs(), std::vector<JobId>{3}) << "the slot came back";
}

TEST_P(SchedulerTest, WholePipelinesAndEncodeOnlyJobsFinish) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("denoise", 1), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(3, W("decode", 1), now_).ok());
  ASSERT_TRUE(
      s_.Submit(Job(1, PriorityClass::kStandard, {"encode", "denoise", "decode"}), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(2), now_).ok());  // Encode only.
  int done = 0;
  for (int round = 0; round < 10 && done < 2; ++round) {
    for (const Action& a : s_.TakeActions()) {
      if (a.kind == Kind::kDispatch) {
        ASSERT_TRUE(s_.StageDone(a.job, a.worker, now_).ok());
      } else if (a.kind == Kind::kJobDone) {
        ++done;
      }
    }
  }
  EXPECT_EQ(done, 2);
  EXPECT_EQ(s_.Stats().jobs, 0u);
  EXPECT_EQ(s_.Stats().dispatches, 4u);
}

TEST_P(SchedulerTest, BadEventsGetSpecificErrors) {
  EXPECT_EQ(s_.Submit(Job(0), now_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s_.Submit(Job(1, PriorityClass::kStandard, {"upscale"}), now_).code(),
            StatusCode::kInvalidArgument)
      << "not a stage of the model";
  JobSpec elsewhere = Job(1);
  elsewhere.model = "undeclared";
  EXPECT_EQ(s_.Submit(elsewhere, now_).code(), StatusCode::kNotFound) << "an undeclared model";
  EXPECT_EQ(s_.Submit(Job(1, PriorityClass::kStandard, {"decode", "encode"}), now_).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(s_.Submit(Job(1), now_).ok());
  EXPECT_EQ(s_.Submit(Job(1), now_).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(s_.WorkerUp(5, W("encode", 0), now_).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(s_.WorkerUp(5, W("encode", 1), now_).ok());
  EXPECT_EQ(s_.WorkerUp(5, W("decode", 1), now_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s_.WorkerUp(6, W("upscale", 1), now_).code(), StatusCode::kNotFound);
  EXPECT_EQ(s_.WorkerUp(6, W("encode", 1, {}, {"undeclared"}), now_).code(), StatusCode::kNotFound);
  EXPECT_EQ(s_.WorkerUp(6, W("encode", 1, {}, {}), now_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s_.Credits(9, 1, now_).code(), StatusCode::kNotFound);
  EXPECT_EQ(s_.StageDone(1, 9, now_).code(), StatusCode::kNotFound);
  ASSERT_TRUE(s_.Submit(Job(2), now_).ok());  // Queued behind job 1.
  EXPECT_EQ(s_.StageDone(2, 5, now_).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s_.WorkerLost(9, now_).code(), StatusCode::kNotFound);
}

TEST_P(SchedulerTest, LostDenoiseJobResumesFromItsLatestCheckpoint) {
  ASSERT_TRUE(s_.WorkerUp(1, W("denoise", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1, PriorityClass::kStandard, {"denoise"}), now_).ok());
  Dispatched();
  ASSERT_TRUE(s_.Progress(1, 1, 10, true, now_).ok());
  ASSERT_TRUE(s_.Progress(1, 1, 12, false, now_).ok());
  EXPECT_EQ(s_.Progress(1, 7, 13, true, now_).code(), StatusCode::kNotFound);
  ASSERT_TRUE(s_.WorkerLost(1, now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("denoise", 1), now_).ok());
  auto acts = s_.TakeActions();
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, Kind::kDispatch);
  EXPECT_EQ(acts[0].worker, 2u);
  EXPECT_EQ(acts[0].resume_step, 10) << "resumes from the checkpoint, not from scratch";
}

TEST_P(SchedulerTest, AJobTakenBackStartsAtItsStartStageFromItsResumeStep) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("denoise", 1), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(3, W("decode", 1), now_).ok());
  const std::vector<std::string> all = {"encode", "denoise", "decode"};
  JobSpec spec = Job(1, PriorityClass::kStandard, all);
  spec.start_stage = 1;
  spec.resume_step = 6;
  ASSERT_TRUE(s_.Submit(spec, now_).ok());
  auto acts = s_.TakeActions();
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].stage, "denoise") << "encode's output survived: it does not run again";
  EXPECT_EQ(acts[0].resume_step, 6);
  spec = Job(2, PriorityClass::kStandard, all);
  spec.start_stage = 3;
  EXPECT_EQ(s_.Submit(spec, now_).code(), StatusCode::kInvalidArgument);
  spec.start_stage = 0;
  spec.resume_step = -1;
  EXPECT_EQ(s_.Submit(spec, now_).code(), StatusCode::kInvalidArgument);
}

TEST_P(SchedulerTest, ADrainingWorkerGetsNoWorkForTheSlotItsReportGivesBack) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(2), now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{1, 1}}));
  ASSERT_TRUE(s_.Draining(1, now_).ok());
  ASSERT_TRUE(s_.Credits(1, 1, now_).ok());
  ASSERT_TRUE(s_.StageDone(1, 1, now_).ok());
  for (const Action& a : s_.TakeActions()) {
    EXPECT_NE(a.kind, Kind::kDispatch) << "job " << a.job << " went to a draining worker";
  }
  // It takes no new work, so readiness no longer counts it (a quarantined
  // worker is drained the same way; it used to keep /readyz at 200).
  EXPECT_EQ(s_.WorkersPerStage(kModel)[0], 0u);
  ASSERT_TRUE(s_.WorkerUp(2, W("encode", 1), now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{2, 2}}));
  EXPECT_EQ(s_.WorkersPerStage(kModel)[0], 1u);
  ASSERT_TRUE(s_.WorkerLost(1, now_).ok());
  EXPECT_EQ(s_.WorkersPerStage(kModel)[0], 1u) << "a lost draining worker is not uncounted twice";
  ASSERT_TRUE(s_.Draining(2, now_).ok());
  ASSERT_TRUE(s_.Draining(2, now_).ok());  // Every heartbeat says so: counted down once.
  EXPECT_EQ(s_.WorkersPerStage(kModel)[0], 0u);
  ASSERT_TRUE(s_.WorkerLost(2, now_).ok());
  EXPECT_EQ(s_.WorkersPerStage(kModel)[0], 0u);
  EXPECT_EQ(s_.Draining(7, now_).code(), StatusCode::kNotFound);
}

TEST_P(SchedulerTest, WaitingInteractiveJobPreemptsBatchDenoise) {
  ASSERT_TRUE(s_.WorkerUp(1, W("denoise", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1, PriorityClass::kBatch, {"denoise"}), now_).ok());
  Dispatched();
  ASSERT_TRUE(s_.Submit(Job(2, PriorityClass::kStandard, {"denoise"}), now_).ok());
  EXPECT_TRUE(s_.TakeActions().empty()) << "standard work waits; only interactive preempts";
  ASSERT_TRUE(s_.Submit(Job(3, PriorityClass::kInteractive, {"denoise"}), now_).ok());
  auto acts = s_.TakeActions();
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, Kind::kCheckpoint);
  EXPECT_EQ(acts[0].job, 1u);
  s_.Tick(now_);
  EXPECT_TRUE(s_.TakeActions().empty()) << "one preemption per waiting interactive job";
  ASSERT_TRUE(s_.Progress(1, 1, 5, true, now_).ok());
  ASSERT_TRUE(s_.Preempted(1, 1, now_).ok());
  EXPECT_EQ(DispatchedJobs(), std::vector<JobId>{3});
  ASSERT_TRUE(s_.StageDone(3, 1, now_).ok());
  acts = s_.TakeActions();
  ASSERT_GE(acts.size(), 2u);
  EXPECT_EQ(acts[1].kind, Kind::kDispatch);
  EXPECT_EQ(acts[1].job, 2u) << "standard before batch";
  ASSERT_TRUE(s_.StageDone(2, 1, now_).ok());
  acts = s_.TakeActions();
  ASSERT_GE(acts.size(), 2u);
  EXPECT_EQ(acts[1].job, 1u);
  EXPECT_EQ(acts[1].resume_step, 5);
  EXPECT_EQ(s_.Stats().preemptions, 1u);
}

TEST_P(SchedulerTest, LostPayloadRerunsItsProducer) {
  const std::vector<std::string> edv = {"encode", "denoise", "decode"};
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(2, W("denoise", 1), now_).ok());
  ASSERT_TRUE(s_.WorkerUp(3, W("decode", 1), now_).ok());
  ASSERT_TRUE(s_.Submit(Job(1, PriorityClass::kStandard, edv), now_).ok());
  ASSERT_TRUE(s_.StageDone(1, 1, now_).ok());  // Encode done; denoise runs.
  s_.TakeActions();
  EXPECT_EQ(s_.PayloadLost(1, "decode", now_).code(), StatusCode::kInvalidArgument);
  // Denoise is running when its input (the embeddings) is lost: it fails,
  // and the encoder runs again instead of the job failing.
  ASSERT_TRUE(s_.PayloadLost(1, "encode", now_).ok());
  EXPECT_TRUE(s_.TakeActions().empty());
  ASSERT_TRUE(s_.StageFailed(1, 2, "input missing", false, now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{1, 1}}));
  ASSERT_TRUE(s_.StageDone(1, 1, now_).ok());
  ASSERT_TRUE(s_.StageDone(1, 2, now_).ok());
  s_.TakeActions();
  // Now queued or running at decode; lose the latent while decode is busy.
  ASSERT_TRUE(s_.WorkerLost(3, now_).ok());
  ASSERT_TRUE(s_.PayloadLost(1, "denoise", now_).ok());
  EXPECT_TRUE(Dispatched().empty()) << "back to denoise, but no decode slot: held back";
  EXPECT_EQ(Queued("denoise"), 1u);
  ASSERT_TRUE(s_.WorkerUp(4, W("decode", 1), now_).ok());
  EXPECT_EQ(Dispatched(), (std::vector<std::pair<JobId, WorkerId>>{{1, 2}}))
      << "denoise re-runs once decode has room";
  EXPECT_EQ(s_.PayloadLost(99, "encode", now_).code(), StatusCode::kNotFound);
}

// A policy that ignores classes (strict arrival order) and affinity.
class FifoPolicy final : public SchedulingPolicy {
 public:
  bool RunsBefore(const QueuedView& a, const QueuedView& b, TimePoint) const override {
    return a.seq < b.seq;
  }
  WorkerId ChooseWorker(const QueuedView&, const WorkerView*,
                        const WorkerView& freest) const override {
    return freest.id;
  }
};

TEST(SchedulerPolicyTest, ACustomPolicyDecidesOrderAndWorkerChoice) {
  for (bool custom : {false, true}) {
    SCOPED_TRACE(custom ? "fifo policy" : "default policy");
    Scheduler s({}, custom ? std::make_unique<FifoPolicy>() : nullptr);
    Declared(s);
    const TimePoint now{};
    ASSERT_TRUE(s.WorkerUp(1, W("encode", 1, {"node=a"}), now).ok());
    ASSERT_TRUE(s.WorkerUp(2, W("encode", 1, {"node=b"}), now).ok());
    JobSpec j;
    j.model = kModel;
    j.pipeline = {"encode"};
    j.id = 1;
    j.affinity = "node=b";
    ASSERT_TRUE(s.Submit(j, now).ok());
    auto acts = s.TakeActions();
    ASSERT_EQ(acts.size(), 1u);
    EXPECT_EQ(acts[0].worker, custom ? 1u : 2u) << "worker choice comes from the policy";
    // Order: with worker 2 busy and worker 1 taken by a blocker, queue a
    // batch job, then an interactive one.
    j.affinity.clear();
    j.id = 2;
    ASSERT_TRUE(s.Submit(j, now).ok());  // Takes the other worker.
    j.id = 3;
    j.priority = PriorityClass::kBatch;
    ASSERT_TRUE(s.Submit(j, now).ok());
    j.id = 4;
    j.priority = PriorityClass::kInteractive;
    ASSERT_TRUE(s.Submit(j, now).ok());
    s.TakeActions();
    ASSERT_TRUE(s.StageDone(2, acts[0].worker == 1 ? 2 : 1, now).ok());
    acts = s.TakeActions();
    ASSERT_EQ(acts.size(), 2u);
    EXPECT_EQ(acts[1].job, custom ? 3u : 4u) << "dispatch order comes from the policy";
  }
}

TEST(SchedulerLimitsTest, SubmitBeyondTheLimitIsResourceExhausted) {
  SchedulerOptions o;
  o.max_queued_jobs = 2;
  Scheduler s(o);
  Declared(s);
  const TimePoint now{};
  JobSpec j;
  j.model = kModel;
  j.id = 1;
  ASSERT_TRUE(s.Submit(j, now).ok());
  j.id = 2;
  ASSERT_TRUE(s.Submit(j, now).ok());
  j.id = 3;
  EXPECT_EQ(s.Submit(j, now).code(), StatusCode::kResourceExhausted);
}

// Fair share across tenants within a class: one encode worker with one
// slot; each case submits (tenant, class) jobs in order, the first of which
// occupies the worker, and expects the dispatch order of the rest.
TEST_P(SchedulerTest, TenantsShareAClassFairly) {
  struct Sub {
    std::string tenant;
    PriorityClass priority = PriorityClass::kBatch;
  };
  struct Case {
    const char* name;
    std::vector<Sub> subs;
    std::vector<std::string> order;  // Tenants, as dispatched after the first.
  };
  const PriorityClass kI = PriorityClass::kInteractive;
  const std::vector<Case> cases = {
      {"one tenant keeps submission order", {{"a"}, {"a"}, {"a"}, {"a"}}, {"a", "a", "a"}},
      {"a flood does not starve a later tenant",
       {{"a"}, {"a"}, {"a"}, {"a"}, {"a"}, {"b"}, {"b"}},
       {"a", "b", "a", "b", "a", "a"}},
      {"three tenants take turns",
       {{"a"}, {"a"}, {"a"}, {"b"}, {"b"}, {"c"}, {"c"}},
       {"a", "b", "c", "a", "b", "c"}},
      {"classes come first: interactive before any batch",
       {{"a"}, {"a"}, {"a"}, {"b", kI}, {"b"}},
       {"b", "a", "b", "a"}},
      {"unnamed tenants are one tenant", {{""}, {""}, {"x"}, {""}}, {"", "x", ""}},
  };
  for (const Case& c : cases) {
    Scheduler s;
    Declared(s);
    ASSERT_TRUE(s.WorkerUp(1, W("encode", 1), now_).ok());
    std::map<JobId, std::string> tenant_of;
    JobId id = 1;
    for (const Sub& sub : c.subs) {
      JobSpec j = Job(id, sub.priority);
      j.tenant = sub.tenant;
      tenant_of[id] = sub.tenant;
      ASSERT_TRUE(s.Submit(j, now_).ok()) << c.name;
      ++id;
    }
    std::vector<std::string> order;
    JobId running = 1;
    (void)s.TakeActions();
    for (std::size_t k = 1; k < c.subs.size(); ++k) {
      ASSERT_TRUE(s.StageDone(running, 1, now_).ok()) << c.name;
      for (const Action& a : s.TakeActions()) {
        if (a.kind == Kind::kDispatch) {
          running = a.job;
          order.push_back(tenant_of[a.job]);
        }
      }
    }
    EXPECT_EQ(order, c.order) << c.name;
  }
}

TEST_P(SchedulerTest, AJobRequeuedAtTheHeadKeepsItsTurnWhateverItsTenant) {
  ASSERT_TRUE(s_.WorkerUp(1, W("encode", 1), now_).ok());
  for (JobId id : {1, 2, 3}) {
    JobSpec j = Job(id);
    j.tenant = id == 1 ? "flooder" : "other";
    ASSERT_TRUE(s_.Submit(j, now_).ok());
  }
  EXPECT_EQ(DispatchedJobs(), std::vector<JobId>{1});
  ASSERT_TRUE(s_.WorkerLost(1, now_).ok());  // Job 1 goes back to the head.
  ASSERT_TRUE(s_.WorkerUp(2, W("encode", 1), now_).ok());
  EXPECT_EQ(DispatchedJobs(), std::vector<JobId>{1});
}

// A job of `model` running only `stage`.
JobSpec StageJob(JobId id, std::string model, std::string stage,
                 PriorityClass p = PriorityClass::kStandard) {
  JobSpec j;
  j.id = id;
  j.model = std::move(model);
  j.pipeline = {std::move(stage)};
  j.priority = p;
  return j;
}

// Models "a" and "b", both with the standard pipeline.
void DeclareAB(Scheduler& s) {
  ASSERT_TRUE(s.DeclareModel({"a", StandardPipeline()}).ok());
  ASSERT_TRUE(s.DeclareModel({"b", StandardPipeline()}).ok());
}

// Two models, one pool each per stage: work goes only to its model's
// workers, however free the others are.
TEST(SchedulerModelsTest, JobsRunOnlyOnTheirOwnModelsWorkers) {
  Scheduler s;
  const TimePoint now{};
  DeclareAB(s);
  ASSERT_TRUE(s.WorkerUp(1, W("encode", 4, {}, {"a"}), now).ok());
  ASSERT_TRUE(s.Submit(StageJob(1, "b", "encode"), now).ok());
  EXPECT_TRUE(s.TakeActions().empty()) << "a's free worker must not take b's job";
  ASSERT_TRUE(s.WorkerUp(2, W("encode", 1, {}, {"b"}), now).ok());
  auto acts = s.TakeActions();
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].worker, 2u);
  EXPECT_EQ(acts[0].stage, "encode");
}

// A worker serving two models takes the better head of either queue.
TEST(SchedulerModelsTest, AWorkerOfTwoModelsServesTheirQueuesByPriority) {
  Scheduler s;
  const TimePoint now{};
  DeclareAB(s);
  ASSERT_TRUE(s.WorkerUp(1, W("encode", 1, {}, {"a", "b"}), now).ok());
  ASSERT_TRUE(
      s.Submit(StageJob(1, "a", "encode", PriorityClass::kStandard), now).ok());  // Takes the slot.
  ASSERT_TRUE(s.Submit(StageJob(2, "a", "encode", PriorityClass::kBatch), now).ok());
  ASSERT_TRUE(s.Submit(StageJob(3, "b", "encode", PriorityClass::kInteractive), now).ok());
  ASSERT_TRUE(s.Submit(StageJob(4, "a", "encode", PriorityClass::kStandard), now).ok());
  std::vector<JobId> order;
  for (JobId running : {1, 3, 4}) {
    (void)s.TakeActions();
    ASSERT_TRUE(s.StageDone(running, 1, now).ok());
    for (const Action& a : s.TakeActions()) {
      if (a.kind == Kind::kDispatch) {
        order.push_back(a.job);
      }
    }
  }
  EXPECT_EQ(order, (std::vector<JobId>{3, 4, 2}));
}

// Whether a stage admits (pinned, reserving a downstream slot) is declared,
// not read from its name: "refine" admits, this model's "denoise" does not.
TEST(SchedulerModelsTest, StageKindsAreDeclaredNotInferredFromNames) {
  Scheduler s;
  const TimePoint now{};
  ASSERT_TRUE(s.DeclareModel({"x",
                              {{"prep", StageKind::kWork},
                               {"refine", StageKind::kAdmission},
                               {"vae", StageKind::kWork},
                               {"upscale", StageKind::kWork}}})
                  .ok());
  ASSERT_TRUE(
      s.DeclareModel({"y", {{"denoise", StageKind::kWork}, {"decode", StageKind::kWork}}}).ok());
  ASSERT_TRUE(s.WorkerUp(1, W("refine", 4, {}, {"x"}), now).ok());
  ASSERT_TRUE(s.WorkerUp(2, W("vae", 1, {}, {"x"}), now).ok());
  ASSERT_TRUE(s.WorkerUp(3, W("denoise", 4, {}, {"y"}), now).ok());
  for (JobId id : {1, 2, 3}) {
    JobSpec j;
    j.id = id;
    j.model = "x";
    j.pipeline = {"refine", "vae", "upscale"};
    ASSERT_TRUE(s.Submit(j, now).ok());
    j.id = id + 10;
    j.model = "y";
    j.pipeline = {};
    ASSERT_TRUE(s.Submit(j, now).ok());
  }
  std::map<std::string, int> dispatched;
  for (const Action& a : s.TakeActions()) {
    dispatched[a.stage] += a.kind == Kind::kDispatch ? 1 : 0;
  }
  EXPECT_EQ(dispatched["refine"], 1) << "one vae slot: one refine admitted";
  EXPECT_EQ(dispatched["denoise"], 3) << "y's denoise is a work stage: no reservation";
  EXPECT_EQ(s.Stats().reserved, 1u);
  for (const PoolStats& p : s.Stats().pools) {
    if (p.model == "x" && p.stage == "vae") {
      EXPECT_EQ(p.reserved, 1u);
      EXPECT_EQ(p.workers, 1u);
    }
  }
}

// Interactive work waiting at a full admission pool preempts batch work on
// that pool's workers only.
TEST(SchedulerModelsTest, PreemptionStaysWithinThePoolsWorkers) {
  Scheduler s;
  const TimePoint now{};
  DeclareAB(s);
  ASSERT_TRUE(s.WorkerUp(1, W("denoise", 1, {}, {"b"}), now).ok());
  ASSERT_TRUE(s.Submit(StageJob(1, "b", "denoise", PriorityClass::kBatch), now).ok());
  ASSERT_TRUE(s.WorkerUp(2, W("denoise", 1, {}, {"a"}), now).ok());
  ASSERT_TRUE(s.Submit(StageJob(2, "a", "denoise", PriorityClass::kBatch), now).ok());
  (void)s.TakeActions();
  ASSERT_TRUE(s.Submit(StageJob(3, "b", "denoise", PriorityClass::kInteractive), now).ok());
  std::vector<JobId> asked;
  for (const Action& a : s.TakeActions()) {
    if (a.kind == Kind::kCheckpoint) {
      asked.push_back(a.job);
    }
  }
  EXPECT_EQ(asked, std::vector<JobId>{1}) << "a's batch job runs on a worker b cannot use";
  ASSERT_TRUE(s.Preempted(1, 1, now).ok());
  auto acts = s.TakeActions();
  ASSERT_FALSE(acts.empty());
  EXPECT_EQ(acts[0].job, 3u);
  EXPECT_EQ(acts[0].worker, 1u);
}

TEST(SchedulerModelsTest, DeclaringAModel) {
  Scheduler s;
  ASSERT_TRUE(s.DeclareModel({"a", StandardPipeline()}).ok());
  EXPECT_TRUE(s.DeclareModel({"a", StandardPipeline()}).ok()) << "the same again: a no-op";
  EXPECT_EQ(s.DeclareModel({"a", {{"denoise", StageKind::kAdmission}}}).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(s.DeclareModel({"", StandardPipeline()}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.DeclareModel({"c", {}}).code(), StatusCode::kInvalidArgument);
  ASSERT_NE(s.FindModel("a"), nullptr);
  EXPECT_EQ(s.FindModel("a")->stages, StandardPipeline());
  EXPECT_EQ(s.FindModel("c"), nullptr);
  EXPECT_EQ(s.Models().size(), 1u);
  EXPECT_EQ(s.Stats().pools.size(), 3u);
}

}  // namespace
}  // namespace sluice::orchestrator
