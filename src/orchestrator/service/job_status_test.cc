// Job statuses: their names are the journals' words, and a finished job
// whose stored word this version does not know is left out of what the
// journal restores (it used to come back as a job never finished, which
// clients would wait on forever); the other jobs restore as before.
#include "orchestrator/service/job_status.h"

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "orchestrator/service/journal.h"

namespace sluice::orchestrator {
namespace {

TEST(JobStatusTest, EveryStatusReadsBackFromItsName) {
  for (JobStatus s : {JobStatus::kQueued, JobStatus::kRunning, JobStatus::kSucceeded,
                      JobStatus::kFailed, JobStatus::kCancelled}) {
    EXPECT_EQ(ParseJobStatus(JobStatusName(s)), s) << JobStatusName(s);
  }
  EXPECT_EQ(JobStatusName(JobStatus::kSucceeded), "succeeded");
  EXPECT_EQ(JobStatusName(JobStatus::kCancelled), "cancelled");
  EXPECT_FALSE(ParseJobStatus("Succeeded").has_value());
  EXPECT_FALSE(ParseJobStatus("").has_value());
  EXPECT_FALSE(IsFinished(JobStatus::kRunning));
  EXPECT_TRUE(IsFinished(JobStatus::kCancelled));
  Result<JobStatus> queued = ParseFinalStatus("queued", "job 3");
  ASSERT_FALSE(queued.ok());
  EXPECT_EQ(queued.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(queued.status().message().find("job 3 finished with status 'queued'"),
            std::string::npos)
      << queued.status().ToString();
}

class JournalStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/sluice-job-status-" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A journal with job `id` finished as `o`.
  void WriteFinished(const JobOutcome& o, JobId id = 7) {
    auto j = Journal::Open(path());
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    JobRequest r;
    r.name = "job-" + std::to_string(id);
    r.request_json = "{}";
    r.pipeline = {"encode", "denoise", "decode"};
    Status added = (*j)->Add(id, r, {});
    ASSERT_TRUE(added.ok()) << added.ToString();
    Status finished = (*j)->Finish(id, o);
    ASSERT_TRUE(finished.ok()) << finished.ToString();
  }
  // Sets job 7's stored status word, as another version would have.
  void SetStoredStatus(const char* word) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path().c_str(), &db), SQLITE_OK);
    const std::string sql = std::string("UPDATE jobs SET status = '") + word + "' WHERE id = 7";
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  std::string path() const { return dir_ + "/journal.db"; }
  std::string dir_;
};

TEST_F(JournalStatusTest, AFinishedJobsStatusIsStoredByNameAndReadBack) {
  JobOutcome o;
  o.status = JobStatus::kCancelled;
  o.finished_unix_s = 1000;
  WriteFinished(o);
  auto j = Journal::Open(path());
  ASSERT_TRUE(j.ok());
  auto f = (*j)->Finished(10, 0);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->size(), 1u);
  EXPECT_EQ((*f)[0].status, JobStatus::kCancelled);
  SetStoredStatus("succeeded");  // The word a journal of any version holds.
  f = (*j)->Finished(10, 0);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)[0].status, JobStatus::kSucceeded);
}

TEST_F(JournalStatusTest, AJobWithAnUnknownStatusWordIsLeftOutAndTheRestRestore) {
  JobOutcome o;
  o.status = JobStatus::kFailed;
  o.error = "boom";
  o.finished_unix_s = 1000;
  WriteFinished(o, 7);
  o.status = JobStatus::kSucceeded;
  o.error.clear();
  o.result = "PNG";
  WriteFinished(o, 8);
  SetStoredStatus("archived");  // Job 7's.
  auto j = Journal::Open(path());
  ASSERT_TRUE(j.ok());
  auto f = (*j)->Finished(10, 0);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->size(), 1u);
  EXPECT_EQ((*f)[0].id, 8u);
  EXPECT_EQ((*f)[0].status, JobStatus::kSucceeded);
}

}  // namespace
}  // namespace sluice::orchestrator
