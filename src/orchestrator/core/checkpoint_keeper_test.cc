#include "orchestrator/core/checkpoint_keeper.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice::orchestrator {
namespace {

using namespace std::chrono_literals;

TEST(CheckpointKeeperTest, AKeptStepResumesUntilItsRetentionPasses) {
  CheckpointKeeper k(60s);
  const TimePoint t0{};
  EXPECT_TRUE(k.Keep(7, 3, t0));
  EXPECT_TRUE(k.Keep(7, 6, t0 + 10s));
  EXPECT_FALSE(k.Keep(7, 3, t0 + 50s)) << "a second report of a step is not kept again";
  EXPECT_TRUE(k.Check(7, "cat", 3, t0 + 60s).ok()) << "the first report's time stays";
  Status expired = k.Check(7, "cat", 3, t0 + 61s);
  EXPECT_EQ(expired.code(), StatusCode::kNotFound) << expired.ToString();
  EXPECT_EQ(expired.message(), "resume_from: the checkpoint of step 3 of job cat has expired");
  EXPECT_TRUE(k.Check(7, "cat", 6, t0 + 70s).ok());
  EXPECT_EQ(k.Check(7, "cat", 6, t0 + 71s).code(), StatusCode::kNotFound);
}

TEST(CheckpointKeeperTest, AStepNotKeptIsNamedWithTheOnesThatWere) {
  CheckpointKeeper k(3600s);
  const TimePoint t0{};
  Status none = k.Check(1, "first", 2, t0);
  EXPECT_EQ(none.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(none.message(),
            "resume_from: job first kept no checkpoints (submit it with keep_checkpoints)");
  k.Keep(1, 4, t0);
  k.Keep(1, 2, t0);
  k.Keep(2, 5, t0);  // Another job's steps are its own.
  Status other = k.Check(1, "first", 5, t0);
  EXPECT_EQ(other.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(other.message(), "resume_from.step: step 5 of job first was not kept (kept: 2, 4)");
  EXPECT_EQ(k.jobs(), 2u);
}

TEST(CheckpointKeeperTest, AForgottenJobKeepsNothing) {
  CheckpointKeeper k(3600s);
  const TimePoint t0{};
  k.Keep(1, 4, t0);
  ASSERT_TRUE(k.Check(1, "a", 4, t0).ok());
  k.Forget(1);
  EXPECT_EQ(k.jobs(), 0u);
  EXPECT_EQ(k.Check(1, "a", 4, t0).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(k.Keep(1, 4, t0)) << "kept anew after being forgotten";
}

}  // namespace
}  // namespace sluice::orchestrator
