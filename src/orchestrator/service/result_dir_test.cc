#include "orchestrator/service/result_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "orchestrator/service/journal.h"

namespace sluice::orchestrator {
namespace {

class ResultDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/sluice-result-dir-" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ResultDirTest, WritesReadsReplacesListsAndRemoves) {
  Result<std::unique_ptr<ResultDir>> d = ResultDir::Open(dir_ + "/nested");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ResultDir& r = **d;
  EXPECT_EQ(r.Read(7).status().code(), StatusCode::kNotFound);
  const std::string big(3 << 20, 'x');
  ASSERT_TRUE(r.Write(7, big).ok());
  ASSERT_TRUE(r.Write(8, "").ok());
  EXPECT_EQ(*r.Read(7), big);
  EXPECT_EQ(*r.Read(8), "");
  ASSERT_TRUE(r.Write(7, "replaced").ok());
  EXPECT_EQ(*r.Read(7), "replaced");
  std::vector<JobId> ids = r.List();
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<JobId>{7, 8}));
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/nested").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "users' content: the owner's only";
  r.Remove(7);
  r.Remove(7);  // Gone already: not an error.
  EXPECT_EQ(r.Read(7).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.List(), std::vector<JobId>{8});
}

TEST_F(ResultDirTest, OpeningDropsPartialWritesAndIgnoresStrangers) {
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ + "/5.result.part") << "cut short";
  std::ofstream(dir_ + "/6.result") << "whole";
  std::ofstream(dir_ + "/notes.txt") << "not ours";
  std::ofstream(dir_ + "/x7.result") << "not a job id";
  Result<std::unique_ptr<ResultDir>> d = ResultDir::Open(dir_);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/5.result.part"));
  EXPECT_EQ((*d)->List(), std::vector<JobId>{6});
  EXPECT_EQ(*(*d)->Read(6), "whole");
}

TEST_F(ResultDirTest, AnUnusablePathIsRefusedNamingIt) {
  EXPECT_EQ(ResultDir::Open("").status().code(), StatusCode::kInvalidArgument);
  std::ofstream(dir_) << "a file, not a directory";
  Result<std::unique_ptr<ResultDir>> d = ResultDir::Open(dir_);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(d.status().message().find(dir_), std::string_view::npos) << d.status().ToString();
  std::filesystem::remove(dir_);
  if (::geteuid() != 0) {  // Root writes anywhere.
    std::filesystem::create_directories(dir_);
    ::chmod(dir_.c_str(), 0500);
    EXPECT_FALSE(ResultDir::Open(dir_ + "/sub").ok());
    ::chmod(dir_.c_str(), 0700);
  }
}

// Users' prompts and results: the journal (and its WAL) and the result
// directory a role creates are its owner's only, whatever the umask.
TEST_F(ResultDirTest, TheJournalAndTheResultDirAreTheirOwnersOnly) {
  const mode_t old = ::umask(022);
  std::filesystem::create_directories(dir_);
  auto journal = Journal::Open(dir_ + "/journal.db");
  ASSERT_TRUE(journal.ok()) << journal.status().ToString();
  auto results = ResultDir::Open(dir_ + "/results");
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ::umask(old);
  for (const char* name : {"/journal.db", "/journal.db-wal", "/results"}) {
    struct stat st {};
    ASSERT_EQ(::stat((dir_ + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_mode & 077, 0u) << name << " mode " << std::oct << (st.st_mode & 0777);
  }
}

}  // namespace
}  // namespace sluice::orchestrator
