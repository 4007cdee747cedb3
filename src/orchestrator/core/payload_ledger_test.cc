#include "orchestrator/core/payload_ledger.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::orchestrator {
namespace {

using Keys = std::vector<std::string>;

TEST(PayloadLedgerTest, AStagesKeysAreOwnedUntilReleasedOnce) {
  PayloadLedger l;
  l.Record(1, "encode", {"1/e/a", "1/e/b"});
  l.Record(1, "denoise", {"1/d/a"});
  l.Record(2, "encode", {"2/e/a"});
  EXPECT_EQ(l.owned(), 4u);
  auto owner = l.Owner("1/e/b");
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->first, 1u);
  EXPECT_EQ(owner->second, "encode");
  EXPECT_TRUE(l.TakeReleased().empty());

  l.Release(1, "encode");
  EXPECT_EQ(l.TakeReleased(), (Keys{"1/e/a", "1/e/b"}));
  EXPECT_FALSE(l.Owner("1/e/a").has_value());
  l.Release(1, "encode");  // Already released: nothing twice.
  l.Release(3, "encode");  // No such job.
  EXPECT_TRUE(l.TakeReleased().empty());

  l.ReleaseJob(1);
  EXPECT_EQ(l.TakeReleased(), (Keys{"1/d/a"}));
  l.ReleaseJob(1);
  EXPECT_TRUE(l.TakeReleased().empty());
  EXPECT_EQ(l.owned(), 1u) << "job 2's key stays";
}

TEST(PayloadLedgerTest, AReRunReplacesALostOutputWithoutReleasingIt) {
  PayloadLedger l;
  l.Record(1, "encode", {"old"});
  l.Drop(1, "encode");  // Lost: nothing to delete.
  EXPECT_FALSE(l.Owner("old").has_value());
  l.Record(1, "encode", {"old2"});
  l.Record(1, "encode", {"new"});  // Replaced: "old2" is disowned, not released.
  EXPECT_FALSE(l.Owner("old2").has_value());
  EXPECT_TRUE(l.Owner("new").has_value());
  l.ReleaseJob(1);
  EXPECT_EQ(l.TakeReleased(), (Keys{"new"}));
}

TEST(PayloadLedgerTest, KeysNobodyOwnsAreReleasedAndOwnedOnesAreNot) {
  PayloadLedger l;
  l.Record(5, "decode", {"live"});
  l.ReleaseUnlessOwned("stale");
  l.ReleaseUnlessOwned("live");
  l.ReleaseKeys({"journaled", "live"});
  EXPECT_EQ(l.TakeReleased(), (Keys{"stale", "journaled"}));
  l.Disown("live");  // Its job finished: the key is nobody's, and not released here.
  EXPECT_EQ(l.owned(), 0u);
  EXPECT_TRUE(l.TakeReleased().empty());
}

}  // namespace
}  // namespace sluice::orchestrator
