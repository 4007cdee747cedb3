// The journal in etcd against a real etcd (label etcd; skipped without
// /usr/bin/etcd): what one orchestrator writes, another opening the same
// prefix reads (a standby taking over); writes are fenced by the leader's
// key; results over the limit come back as dropped.
#include "orchestrator/service/etcd_journal.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "discovery/testing/etcd_server.h"

namespace sluice::orchestrator {
namespace {

using namespace std::chrono_literals;

class EtcdJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!discovery::testing::EtcdServer::Available()) {
      GTEST_SKIP() << "no /usr/bin/etcd (Debian's etcd-server)";
    }
    etcd_ = std::make_unique<discovery::testing::EtcdServer>();
    auto c = discovery::EtcdClient::Create({etcd_->url()}, 2000ms);
    ASSERT_TRUE(c.ok());
    client_ = std::move(*c);
  }
  std::unique_ptr<EtcdJournal> Open(EtcdJournal::Options o = {}) {
    if (o.prefix.empty()) {
      o.prefix = "/sluice/t/orchestrator/journal/";
    }
    auto j = EtcdJournal::Open(client_.get(), o);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? std::move(*j) : nullptr;
  }
  static JobRequest Request(const std::string& name) {
    JobRequest r;
    r.kind = "image";
    r.name = name;
    r.tenant = "acme";
    r.request_json = R"({"prompt":"a lighthouse","keep_checkpoints":true})";
    r.model = "ref";
    r.pipeline = {"encode", "denoise", "decode"};
    r.priority = PriorityClass::kInteractive;
    r.deadline = 60s;
    r.affinity = "a1";
    return r;
  }
  static std::vector<StageDecl> Stages() { return *ParsePipeline("encode,denoise,decode"); }

  std::unique_ptr<discovery::testing::EtcdServer> etcd_;
  std::unique_ptr<discovery::EtcdClient> client_;
};

TEST_F(EtcdJournalTest, AStandbyReadsWhatTheLeaderWrote) {
  auto leader = Open();
  ASSERT_NE(leader, nullptr);
  ASSERT_TRUE(leader->Add(1, Request("job-a"), Stages()).ok());
  ASSERT_TRUE(leader->Add(2, Request("job-b"), Stages()).ok());
  ASSERT_TRUE(leader->Add(3, Request("job-c"), Stages()).ok());
  JobProgress p;
  p.done = "encode";
  p.output = std::string("out\n\0put", 9);  // Bytes as they are, newlines and zeros too.
  p.keys = {"k1", "k2"};
  p.checkpoint_step = 4;
  ASSERT_TRUE(leader->SaveProgress(2, p).ok());
  JobOutcome ok{
      JobStatus::kSucceeded, "", "", "image/png", std::string_view("PNG\x89\0bytes", 10), 1000};
  ASSERT_TRUE(leader->Finish(1, ok).ok());
  ASSERT_TRUE(leader->Keep({2, 3, 5000}).ok());
  ASSERT_TRUE(leader->Keep({2, 3, 6000}).ok());  // A second report: no-op.
  ASSERT_TRUE(leader->Flush().ok());             // The queued writes are in etcd.

  auto standby = Open();
  ASSERT_NE(standby, nullptr);
  EXPECT_EQ(*standby->MaxId(), 3u);
  auto unfinished = standby->Unfinished();
  ASSERT_TRUE(unfinished.ok()) << unfinished.status().ToString();
  ASSERT_EQ(unfinished->size(), 2u);
  const JournaledJob& b = (*unfinished)[0];
  EXPECT_EQ(b.id, 2u);
  EXPECT_EQ(b.request.name, "job-b");
  EXPECT_EQ(b.request.tenant, "acme");
  EXPECT_EQ(b.request.model, "ref");
  EXPECT_EQ(b.request.affinity, "a1");
  EXPECT_EQ(b.request.priority, PriorityClass::kInteractive);
  EXPECT_TRUE(b.request.keep_checkpoints);
  ASSERT_TRUE(b.request.deadline.has_value());
  EXPECT_GT(b.request.deadline->count(), 50000);
  EXPECT_EQ(b.request.pipeline, (std::vector<std::string>{"encode", "denoise", "decode"}));
  EXPECT_EQ(b.model_stages.size(), 3u);
  ASSERT_TRUE(b.progress.done.has_value());
  EXPECT_EQ(*b.progress.done, "encode");
  EXPECT_EQ(b.progress.output, p.output);
  EXPECT_EQ(b.progress.keys, p.keys);
  EXPECT_EQ(b.progress.checkpoint_step, 4);
  EXPECT_EQ((*unfinished)[1].id, 3u);
  EXPECT_FALSE((*unfinished)[1].progress.done.has_value());

  auto finished = standby->Finished(10, 0);
  ASSERT_TRUE(finished.ok());
  ASSERT_EQ(finished->size(), 1u);
  EXPECT_EQ((*finished)[0].request.name, "job-a");
  EXPECT_EQ((*finished)[0].status, JobStatus::kSucceeded);
  EXPECT_EQ((*finished)[0].result, std::string(ok.result));
  EXPECT_EQ((*finished)[0].result_type, "image/png");
  EXPECT_FALSE((*finished)[0].result_dropped);
  auto kept = standby->Kept();
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(kept->size(), 1u);
  EXPECT_EQ((*kept)[0].job, 2u);
  EXPECT_EQ((*kept)[0].step, 3);
  EXPECT_EQ((*kept)[0].unix_ms, 5000);

  // Pruning forgets finished jobs past the newest `keep` and old kept steps.
  JobOutcome failed{JobStatus::kFailed, "boom", "server_error", "", {}, 2000};
  ASSERT_TRUE(standby->Finish(3, failed).ok());
  ASSERT_TRUE(standby->Prune(1, 0, 0).ok());
  ASSERT_TRUE(standby->Flush().ok());
  auto after = Open();
  ASSERT_NE(after, nullptr);
  auto left = after->Finished(10, 0);
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].id, 3u);
  EXPECT_EQ((*left)[0].error, "boom");
  EXPECT_EQ(after->Kept()->size(), 1u) << "job 2 is unfinished: its kept step stays";
  ASSERT_TRUE(after->Prune(10, 0, 5001).ok());
  ASSERT_TRUE(after->Flush().ok());
  EXPECT_EQ(Open()->Kept()->size(), 0u);
  auto gone = client_->Get("/sluice/t/orchestrator/journal/result/00000000000000000001");
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value()) << "a pruned job's result is deleted";
}

// Submitters at once, as an orchestrator's clients: every job lands, and
// the queued writes share transactions (a job's two progress saves and
// its finish name one key twice, which etcd refuses in one transaction:
// they are merged, not sent one by one).
TEST_F(EtcdJournalTest, ConcurrentSubmittersShareTransactionsAndEveryWriteLands) {
  auto j = Open();
  ASSERT_NE(j, nullptr);
  constexpr int kThreads = 8, kJobs = 40;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kJobs; ++i) {
        const JobId id = 1 + t * kJobs + i;
        JobProgress p;
        p.done = "encode";
        p.output = "descriptor-" + std::to_string(id);
        const bool ok =
            j->Add(id, Request("job-" + std::to_string(id)), Stages()).ok() &&
            j->SaveProgress(id, p).ok() && (p.done = "denoise", j->SaveProgress(id, p).ok()) &&
            (id % 4 == 0 ||  // Every fourth stays unfinished.
             j->Finish(id, {JobStatus::kSucceeded, "", "", "image/png", "png", 1}).ok());
        failures += ok ? 0 : 1;
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  ASSERT_EQ(failures.load(), 0);
  ASSERT_TRUE(j->Flush().ok());
  const int groups = kThreads * kJobs * 4 - kThreads * kJobs / 4;
  EXPECT_LT(j->transactions(), static_cast<std::uint64_t>(groups / 2)) << "writes were not batched";
  auto fresh = Open();
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(*fresh->MaxId(), static_cast<JobId>(kThreads * kJobs));
  auto unfinished = fresh->Unfinished();
  ASSERT_TRUE(unfinished.ok());
  ASSERT_EQ(unfinished->size(), static_cast<std::size_t>(kThreads * kJobs / 4));
  for (const JournaledJob& u : *unfinished) {
    EXPECT_EQ(u.id % 4, 0u);
    ASSERT_TRUE(u.progress.done.has_value());
    EXPECT_EQ(*u.progress.done, "denoise") << "the last save stands";
    EXPECT_EQ(u.progress.output, "descriptor-" + std::to_string(u.id));
  }
  auto finished = fresh->Finished(1000, 0);
  ASSERT_TRUE(finished.ok());
  EXPECT_EQ(finished->size(), static_cast<std::size_t>(kThreads * kJobs * 3 / 4));
}

// An etcd that answers nothing: the queued writes fail together after one
// transaction's timeout, not one timeout each (300 writes, a 2 s client
// timeout: ~10 minutes if each were tried alone), and once etcd answers
// again the journal writes again.
TEST_F(EtcdJournalTest, WithEtcdSilentQueuedWritesFailTogether) {
  auto j = Open();
  ASSERT_NE(j, nullptr);
  ASSERT_TRUE(j->Add(1, Request("job-a"), Stages()).ok());
  etcd_->Pause();
  JobProgress p;
  p.done = "encode";
  for (int i = 0; i < 300; ++i) {
    p.output = "try-" + std::to_string(i);
    ASSERT_TRUE(j->SaveProgress(1, p).ok());  // Queued.
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = j->Flush();
  const auto took = std::chrono::steady_clock::now() - t0;
  etcd_->Resume();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_LT(took, 60s) << "each write waited out its own timeout";
  // Job 2: a write to job 1 that timed out may still be applied by etcd
  // once it runs again, after a newer one (as with any etcd client).
  ASSERT_TRUE(j->Add(2, Request("job-b"), Stages()).ok());
  p.output = "after";
  ASSERT_TRUE(j->SaveProgress(2, p).ok());
  ASSERT_TRUE(j->Flush().ok());
  auto unfinished = Open()->Unfinished();
  ASSERT_TRUE(unfinished.ok());
  ASSERT_EQ(unfinished->size(), 2u);
  EXPECT_EQ((*unfinished)[1].progress.output, "after");
}

TEST_F(EtcdJournalTest, OnlyTheLeaderWrites) {
  auto lease = client_->Grant(10s);
  ASSERT_TRUE(lease.ok());
  const std::string key = "/sluice/t/orchestrator/leader";
  ASSERT_TRUE(client_->Put(key, "me", *lease).ok());
  EtcdJournal::Options o;
  o.fence_key = key;
  o.fence_lease = *lease;
  auto j = Open(o);
  ASSERT_NE(j, nullptr);
  ASSERT_TRUE(j->Add(1, Request("job-a"), Stages()).ok());
  // Another leads now (the key is held under another lease).
  ASSERT_TRUE(client_->Revoke(*lease).ok());
  auto theirs = client_->Grant(10s);
  ASSERT_TRUE(theirs.ok());
  ASSERT_TRUE(client_->Put(key, "them", *theirs).ok());
  Status s = j->Add(2, Request("job-b"), Stages());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("no longer leads"), std::string_view::npos) << s.ToString();
  EXPECT_EQ(j->Finish(1, {JobStatus::kSucceeded, "", "", "image/png", "x", 1}).code(),
            StatusCode::kFailedPrecondition);
  auto fresh = Open();
  ASSERT_NE(fresh, nullptr);
  auto unfinished = fresh->Unfinished();
  ASSERT_TRUE(unfinished.ok());
  ASSERT_EQ(unfinished->size(), 1u) << "nothing of the fenced writes landed";
  EXPECT_EQ((*unfinished)[0].id, 1u);
}

TEST_F(EtcdJournalTest, ALargeResultIsNotKeptAndSaysSo) {
  EtcdJournal::Options o;
  o.max_result_bytes = 1000;
  auto j = Open(o);
  ASSERT_NE(j, nullptr);
  ASSERT_TRUE(j->Add(1, Request("job-a"), Stages()).ok());
  const std::string big(1001, 'v');
  ASSERT_TRUE(j->Finish(1, {JobStatus::kSucceeded, "", "", "video/mp4", big, 10}).ok());
  ASSERT_TRUE(j->Flush().ok());
  auto f = Open()->Finished(10, 0);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->size(), 1u);
  EXPECT_TRUE((*f)[0].result.empty());
  EXPECT_TRUE((*f)[0].result_dropped);

  o.max_result_bytes = (std::size_t{1} << 20) + 1;
  EXPECT_EQ(EtcdJournal::Open(client_.get(), o).status().code(), StatusCode::kInvalidArgument);
  o.max_result_bytes = 1000;
  o.prefix = "/no/slash";
  EXPECT_EQ(EtcdJournal::Open(client_.get(), o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::orchestrator
