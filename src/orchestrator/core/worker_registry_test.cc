#include "orchestrator/core/worker_registry.h"

#include <set>

#include "gtest/gtest.h"

namespace sluice::orchestrator {
namespace {

using namespace std::chrono_literals;

TEST(WorkerRegistryTest, AWorkerIsSilentOnlyPastTheTimeoutSinceItWasLastHeard) {
  WorkerRegistry r(3000ms);
  const TimePoint t0{};
  const WorkerId a = r.NewId();
  r.Add(a, "denoise", 2, 77, t0);
  const WorkerId b = r.NewId();
  ASSERT_NE(a, b);
  r.Add(b, "decode", 1, 0, t0 + 1000ms);
  ASSERT_NE(r.Find(a), nullptr);
  EXPECT_EQ(r.Find(a)->stage, "denoise");
  EXPECT_EQ(r.Find(a)->capacity, 2);
  EXPECT_EQ(r.Find(a)->instance, 77u);

  EXPECT_TRUE(r.Silent(t0 + 3000ms).empty()) << "at the timeout, not past it";
  EXPECT_EQ(r.Silent(t0 + 3001ms), std::vector<WorkerId>{a});
  EXPECT_TRUE(r.Heard(a, t0 + 3001ms));
  EXPECT_TRUE(r.Silent(t0 + 4000ms).empty());
  EXPECT_EQ(r.Silent(t0 + 4001ms), std::vector<WorkerId>{b});
  const std::vector<WorkerId> both = r.Silent(t0 + 7000ms);
  EXPECT_EQ(std::set<WorkerId>(both.begin(), both.end()), (std::set<WorkerId>{a, b}));

  r.Remove(a);
  EXPECT_EQ(r.Find(a), nullptr);
  EXPECT_FALSE(r.Heard(a, t0)) << "an unknown worker";
  EXPECT_EQ(r.Silent(t0 + 7000ms), std::vector<WorkerId>{b});
}

TEST(WorkerRegistryTest, ReportsAndRefusedOutputsAreCountedPerWorker) {
  WorkerRegistry r(1000ms);
  const WorkerId a = r.NewId();
  r.Add(a, "decode", 1, 0, TimePoint{});
  r.CountReport(a);
  r.CountReport(a);
  r.CountReport(a + 1);  // Unknown: nothing.
  EXPECT_EQ(r.Find(a)->reports, 2u);
  EXPECT_EQ(r.CountBadOutput(a), 1);
  EXPECT_EQ(r.CountBadOutput(a), 2);
  EXPECT_EQ(r.CountBadOutput(a + 1), 0);
  EXPECT_EQ(r.size(), 1u);
}

TEST(WorkerRegistryTest, NewIdsAreNonZeroBelowTwoToThe53AndUnused) {
  WorkerRegistry r(1000ms);
  std::set<WorkerId> seen;
  for (int i = 0; i < 200; ++i) {
    const WorkerId id = r.NewId();
    EXPECT_NE(id, 0u);
    EXPECT_LT(id, WorkerId{1} << 53);
    EXPECT_EQ(r.Find(id), nullptr);
    r.Add(id, "encode", 1, 0, TimePoint{});
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 200u);
}

}  // namespace
}  // namespace sluice::orchestrator
