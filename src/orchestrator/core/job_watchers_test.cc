#include "orchestrator/core/job_watchers.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice::orchestrator {
namespace {

TEST(JobWatchersTest, EachJobWakesItsOwnWatchersUntilTheyAreRemoved) {
  JobWatchers w;
  std::string woke;
  const std::uint64_t a = w.Add(1, [&] { woke += "a"; });
  const std::uint64_t b = w.Add(1, [&] { woke += "b"; });
  const std::uint64_t c = w.Add(2, [&] { woke += "c"; });
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(w.size(), 3u);
  w.Wake(1);
  EXPECT_EQ(woke, "ab");
  w.Wake(2);
  w.Wake(3);  // Nobody watches it.
  EXPECT_EQ(woke, "abc");
  std::function<void()> removed = w.Remove(a);
  ASSERT_TRUE(removed) << "the wake is handed back, to be destroyed outside a lock";
  removed();
  EXPECT_EQ(woke, "abca");
  woke.clear();
  w.Wake(1);
  EXPECT_EQ(woke, "b");
  EXPECT_FALSE(w.Remove(a)) << "removed twice";
  EXPECT_FALSE(w.Remove(0));
  EXPECT_FALSE(w.Remove(999));
  EXPECT_TRUE(w.Remove(b));
  EXPECT_TRUE(w.Remove(c));
  EXPECT_EQ(w.size(), 0u);
  woke.clear();
  w.Wake(1);
  w.Wake(2);
  EXPECT_EQ(woke, "");
  EXPECT_GT(w.Add(1, [] {}), c) << "tokens are not reused";
}

}  // namespace
}  // namespace sluice::orchestrator
