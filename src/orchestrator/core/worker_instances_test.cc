#include "orchestrator/core/worker_instances.h"

#include "gtest/gtest.h"

namespace sluice::orchestrator {
namespace {

TEST(WorkerInstancesTest, ANewerAttemptReplacesAndAnOlderOneIsRefused) {
  WorkerInstances w;
  auto first = w.Admit(9, 1);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->has_value()) << "nothing to replace yet";
  w.Bind(9, 1, 100);
  EXPECT_EQ(w.size(), 1u);

  auto again = w.Admit(9, 2);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(again->has_value());
  EXPECT_EQ(**again, 100u) << "the registration it replaces";
  w.Bind(9, 2, 200);

  for (std::uint64_t stale : {1u, 2u}) {
    auto late = w.Admit(9, stale);
    ASSERT_FALSE(late.ok());
    EXPECT_EQ(late.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(late.status().message(),
              "registration attempt " + std::to_string(stale) +
                  " is older than this worker's attempt 2 (delayed in the network)");
  }
}

TEST(WorkerInstancesTest, OnlyTheCurrentRegistrationsLossForgetsTheInstance) {
  WorkerInstances w;
  w.Bind(9, 1, 100);
  w.Bind(9, 2, 200);
  w.Lost(9, 100);  // The replaced registration: the current one stays.
  EXPECT_EQ(w.size(), 1u);
  EXPECT_FALSE(w.Admit(9, 2).ok());
  w.Lost(9, 200);
  EXPECT_EQ(w.size(), 0u);
  auto fresh = w.Admit(9, 1);
  ASSERT_TRUE(fresh.ok()) << "a forgotten instance starts over";
  EXPECT_FALSE(fresh->has_value());
}

TEST(WorkerInstancesTest, AWorkerWithoutAnInstanceIsAlwaysAdmitted) {
  WorkerInstances w;
  w.Bind(0, 5, 100);
  EXPECT_EQ(w.size(), 0u);
  auto a = w.Admit(0, 0);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->has_value());
}

}  // namespace
}  // namespace sluice::orchestrator
