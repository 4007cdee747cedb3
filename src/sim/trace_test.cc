#include "sim/trace.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "sim/workloads.h"

namespace sluice::sim {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TraceTest, ReadsJobsWithAHeaderCommentsAndDefaultPriority) {
  Result<std::vector<TracedJob>> t =
      ReadTraceCsv(WriteTemp("ok.csv",
                             "t_s,model,priority\n# a comment\n0,flux-1024,interactive\n\n"
                             "0.5, wan2.1-480p ,batch\r\n2.25,flux-1024\n"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ((*t)[1].model, "wan2.1-480p");
  EXPECT_EQ((*t)[1].priority, orchestrator::PriorityClass::kBatch);
  EXPECT_EQ((*t)[2].t_s, 2.25);
  EXPECT_EQ((*t)[2].priority, orchestrator::PriorityClass::kStandard);
}

TEST(TraceTest, ABadLineIsRefusedByNumber) {
  struct Case {
    const char* csv;
    const char* error;
  };
  for (const Case& c : {Case{"1,flux-1024\nsoon,flux-1024\n", "line 2: t_s 'soon'"},
                        Case{"2,flux-1024\n1,flux-1024\n", "line 2: t_s 1 is before"},
                        Case{"-1,flux-1024\n", "line 1: t_s '-1'"},
                        Case{"1,flux-1024,urgent\n", "line 1: priority 'urgent'"},
                        Case{"1\n", "line 1: want t_s,model,priority"},
                        Case{"1,,batch\n", "line 1: no model"}, Case{"# nothing\n", "no jobs"}}) {
    Result<std::vector<TracedJob>> t = ReadTraceCsv(WriteTemp("bad.csv", c.csv));
    ASSERT_FALSE(t.ok()) << c.csv;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.error), std::string::npos) << t.status().message();
  }
  EXPECT_EQ(ReadTraceCsv(::testing::TempDir() + "/none.csv").status().code(),
            StatusCode::kNotFound);
}

TEST(TraceTest, TracedJobsArriveAtTheirTimesAndWarmUpsAreLeftOut) {
  SimConfig c;
  c.models = {SimProfile(*::sluice::FindModelProfile("flux-1024"), 1, /*exact=*/true)};
  c.pools = {{"flux-1024", "encode", 1, 1, {}},
             {"flux-1024", "denoise", 1, 1, {}},
             {"flux-1024", "decode", 1, 1, {}}};
  c.duration_s = 100;
  c.trace = {{0, "flux-1024", orchestrator::PriorityClass::kStandard, false},
             {0, "flux-1024", orchestrator::PriorityClass::kStandard, true},
             {100, "flux-1024", orchestrator::PriorityClass::kStandard, true}};
  c.keep_samples = true;
  Result<SimResult> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->classes.size(), 1u);
  const ClassResult& k = r->classes[0];
  EXPECT_EQ(k.submitted, 2u);
  EXPECT_EQ(k.completed, 2u);
  ASSERT_EQ(k.latency_samples.size(), 2u);
  const double service = 0.052 + 28 * 0.139 + 0.31;
  // The last job found the cluster idle; the second queued behind the
  // warm-up job's denoise.
  EXPECT_NEAR(k.latency_samples[0], service, 0.01);
  EXPECT_GT(k.latency_samples[1], service + 3.5);
  EXPECT_NEAR(k.last_done_s, 100 + service, 0.01);

  c.trace[2].t_s = 150;  // Past duration_s.
  EXPECT_EQ(Simulate(c).status().code(), StatusCode::kInvalidArgument);
  c.trace[2].t_s = 50;
  c.trace[2].model = "sdxl";
  Result<SimResult> bad = Simulate(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sdxl"), std::string::npos);
}

}  // namespace
}  // namespace sluice::sim
