#include "store/master/segment_allocator.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

TEST(SegmentAllocatorTest, BestFitAndCoalescing) {
  SegmentAllocator a(1024);
  auto x = a.Allocate(100);  // 128
  auto y = a.Allocate(64);
  auto z = a.Allocate(256);
  ASSERT_TRUE(x.ok() && y.ok() && z.ok());
  EXPECT_EQ(*x, 0u);
  EXPECT_EQ(*y, 128u);
  EXPECT_EQ(*z, 192u);
  a.Free(*y, 64);  // Hole of 64 between x and z.
  EXPECT_EQ(*a.Allocate(10), 128u) << "best fit takes the small hole";
  a.Free(128, 10);
  a.Free(*x, 100);
  a.Free(*z, 256);
  AllocatorStats s = a.Stats();
  EXPECT_EQ(s.used, 0u);
  EXPECT_EQ(s.free_extents, 1u) << "frees coalesce back into one extent";
  EXPECT_EQ(s.largest_free, 1024u);
  EXPECT_EQ(s.fragmentation, 0.0);
}

TEST(SegmentAllocatorTest, ExhaustionAndFragmentationAreReported) {
  SegmentAllocator a(64 * 8);
  std::vector<std::uint64_t> offs;
  for (int i = 0; i < 8; ++i) {
    offs.push_back(*a.Allocate(64));
  }
  EXPECT_EQ(a.Allocate(1).status().code(), StatusCode::kResourceExhausted);
  a.Free(offs[1], 64);
  a.Free(offs[3], 64);
  EXPECT_EQ(a.Allocate(128).status().code(), StatusCode::kResourceExhausted);
  EXPECT_DOUBLE_EQ(a.Stats().fragmentation, 0.5);
  EXPECT_EQ(a.Allocate(0).status().code(), StatusCode::kInvalidArgument);
}

TEST(SegmentAllocatorTest, AllocateAtClaimsExactRangesOnly) {
  SegmentAllocator a(1024);
  ASSERT_TRUE(a.AllocateAt(256, 100).ok());
  EXPECT_EQ(a.AllocateAt(320, 10).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(a.AllocateAt(3, 10).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(a.AllocateAt(0, 64).ok());
  EXPECT_EQ(a.used(), 64u + 128u);
  EXPECT_EQ(*a.Allocate(64), 64u) << "the gap before the claimed range stays usable";
  a.Free(256, 100);
  a.Free(0, 64);
  a.Free(64, 64);
  EXPECT_EQ(a.Stats().free_extents, 1u);
}

TEST(SegmentAllocatorTest, LargeAllocationsArePageAlignedAndTheSkippedSpaceStaysFree) {
  SegmentAllocator a(1 << 20);
  ASSERT_EQ(*a.Allocate(1), 0u);
  auto big = a.Allocate(SegmentAllocator::kPageAlignFrom);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(*big, SegmentAllocator::kPage) << "skips to the next page";
  EXPECT_EQ(a.used(), 64u + SegmentAllocator::kPageAlignFrom) << "the skipped space is not used";
  // The space skipped before the page is where small objects go next.
  EXPECT_EQ(*a.Allocate(100), 64u);
  auto big2 = a.Allocate(SegmentAllocator::kPageAlignFrom + 1);
  ASSERT_TRUE(big2.ok());
  EXPECT_EQ(*big2 % SegmentAllocator::kPage, 0u);
  a.Free(0, 1);
  a.Free(64, 100);
  a.Free(*big, SegmentAllocator::kPageAlignFrom);
  a.Free(*big2, SegmentAllocator::kPageAlignFrom + 1);
  EXPECT_EQ(a.Stats().free_extents, 1u);
  // An extent that only fits once aligned is skipped for one that does.
  constexpr std::uint64_t k64 = SegmentAllocator::kPageAlignFrom;
  SegmentAllocator b(1 << 20);
  ASSERT_TRUE(b.AllocateAt(0, 64).ok());
  ASSERT_TRUE(b.AllocateAt(k64 + 128, 64).ok());  // Leaves [64, k64 + 128): too short once aligned.
  auto c = b.Allocate(k64);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, k64 + SegmentAllocator::kPage);
}

TEST(SegmentAllocatorTest, RandomWorkloadKeepsAccountingExact) {
  SegmentAllocator a(8 << 20);
  std::mt19937_64 rng(1);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;
  for (int i = 0; i < 20000; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      const std::uint64_t len = 1 + rng() % (rng() % 4 == 0 ? 200000 : 8192);
      auto off = a.Allocate(len);
      if (off.ok()) {
        if (len >= SegmentAllocator::kPageAlignFrom) {
          ASSERT_EQ(*off % SegmentAllocator::kPage, 0u);
        }
        live.emplace_back(*off, len);
      }
    } else {
      const std::size_t k = rng() % live.size();
      a.Free(live[k].first, live[k].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  std::uint64_t used = 0;
  for (auto& [off, len] : live) {
    used += SegmentAllocator::Rounded(len);
  }
  EXPECT_EQ(a.used(), used);
  std::sort(live.begin(), live.end());
  for (std::size_t i = 1; i < live.size(); ++i) {
    EXPECT_GE(live[i].first, live[i - 1].first + live[i - 1].second) << "allocations overlap";
  }
  for (auto& [off, len] : live) {
    a.Free(off, len);
  }
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.Stats().free_extents, 1u);
}

}  // namespace
}  // namespace sluice::internal
