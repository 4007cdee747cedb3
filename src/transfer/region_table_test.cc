#include "transfer/region_table.h"

#include <vector>

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

TEST(RegionTableTest, LocalLookupNeedsOneRegionHoldingTheWholeRange) {
  RegionTableLocal t;
  std::vector<char> a(100), b(100);
  auto ka = t.Add(a.data(), a.size(), MemoryKind::kHost, Access::kLocalOnly, nullptr);
  ASSERT_TRUE(ka.ok());
  auto r = t.PinLocal(a.data() + 10, 90);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->key, *ka);
  RegionTableLocal::Unpin(*r);
  EXPECT_EQ(t.PinLocal(a.data() + 10, 91).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.PinLocal(b.data(), 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(RegionTableTest, RemoteLookupChecksKeyBoundsAndAccess) {
  RegionTableLocal t;
  std::vector<char> a(100), hidden(100);
  auto k = t.Add(a.data(), a.size(), MemoryKind::kHost, Access::kRemoteRead, nullptr);
  auto kh = t.Add(hidden.data(), hidden.size(), MemoryKind::kHost, Access::kLocalOnly, nullptr);
  ASSERT_TRUE(k.ok() && kh.ok());
  LocalRegion* r = nullptr;
  auto p = t.PinRemote(k->value, 50, 50, false, false, &r);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, a.data() + 50);
  RegionTableLocal::Unpin(r);
  EXPECT_EQ(t.PinRemote(k->value, 51, 50, false, false, &r).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(t.PinRemote(k->value, UINT64_MAX, 2, false, false, &r).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(t.PinRemote(k->value, 0, 1, true, false, &r).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(t.PinRemote(kh->value, 0, 1, false, false, &r).status().code(), StatusCode::kNotFound)
      << "local-only regions are invisible to peers";
  EXPECT_EQ(t.PinRemote(k->value + 1, 0, 1, false, false, &r).status().code(),
            StatusCode::kNotFound);
}

TEST(RegionTableTest, OverlapIsRejectedAndPinsBlockRemoval) {
  RegionTableLocal t;
  std::vector<char> a(100);
  auto k = t.Add(a.data() + 10, 50, MemoryKind::kHost, Access::kRemoteReadWrite, nullptr);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(t.Add(a.data(), 11, MemoryKind::kHost, Access::kLocalOnly, nullptr).status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(
      t.Add(a.data() + 59, 10, MemoryKind::kHost, Access::kLocalOnly, nullptr).status().code(),
      StatusCode::kAlreadyExists);
  EXPECT_TRUE(t.Add(a.data(), 10, MemoryKind::kHost, Access::kLocalOnly, nullptr).ok());
  auto pinned = t.PinLocal(a.data() + 20, 5);
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(t.Remove(*k).code(), StatusCode::kFailedPrecondition);
  RegionTableLocal::Unpin(*pinned);
  EXPECT_TRUE(t.Remove(*k).ok());
  EXPECT_EQ(t.Remove(*k).code(), StatusCode::kNotFound);
}

TEST(RegionTableTest, SnapshotPublishesRemoteRegionsAndBumpsTheVersion) {
  RegionTableLocal t;
  std::vector<char> a(100), b(100);
  const std::uint64_t v0 = t.Snapshot().version;
  auto k = t.Add(a.data(), a.size(), MemoryKind::kHost, Access::kRemoteWrite, nullptr);
  ASSERT_TRUE(t.Add(b.data(), b.size(), MemoryKind::kHost, Access::kLocalOnly, nullptr).ok());
  RegionTable snap = t.Snapshot();
  EXPECT_GT(snap.version, v0);
  ASSERT_EQ(snap.regions.size(), 1u);
  EXPECT_EQ(snap.regions[0].info.key, *k);
  EXPECT_EQ(snap.regions[0].info.length, 100u);
  EXPECT_FALSE(snap.regions[0].info.shared);
}

}  // namespace
}  // namespace sluice::internal
