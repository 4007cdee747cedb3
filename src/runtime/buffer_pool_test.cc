#include "runtime/buffer_pool.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace sluice::internal {
namespace {

TEST(BufferPoolTest, AReturnedBufferIsHandedOutAgainWithoutAllocating) {
  auto pool = BufferPool::Create();
  const void* first = nullptr;
  {
    BufferPool::Lease a = pool->Acquire(4 << 20);
    ASSERT_NE(a.data(), nullptr);
    EXPECT_GE(a.capacity(), std::size_t{4} << 20);
    // A new buffer comes zeroed (touched); writing all of it is fine.
    EXPECT_EQ(static_cast<const std::uint8_t*>(a.data())[(4 << 20) - 1], 0);
    std::memset(a.data(), 7, a.capacity());
    first = a.data();
    EXPECT_EQ(pool->idle(), 0u);
  }
  EXPECT_EQ(pool->idle(), 1u);
  BufferPool::Lease again = pool->Acquire(1 << 20);  // Smaller fits in it.
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(static_cast<const std::uint8_t*>(again.data())[0], 7) << "what the last job left";
  EXPECT_EQ(pool->idle(), 0u);
}

TEST(BufferPoolTest, TheSmallestIdleBufferThatFitsIsChosen) {
  auto pool = BufferPool::Create();
  const void* big = nullptr;
  const void* small = nullptr;
  {
    BufferPool::Lease b = pool->Acquire(4096 * 8);
    BufferPool::Lease s = pool->Acquire(4096);
    big = b.data();
    small = s.data();
  }
  EXPECT_EQ(pool->Acquire(100).data(), small);
  EXPECT_EQ(pool->Acquire(4097).data(), big);
  // Nothing idle fits: a new one.
  BufferPool::Lease bigger = pool->Acquire(4096 * 9);
  EXPECT_NE(bigger.data(), big);
  EXPECT_NE(bigger.data(), small);
}

TEST(BufferPoolTest, BuffersPastTheIdleBoundAndAtTheEndAreFreedThroughOnFree) {
  std::vector<const void*> freed;
  std::set<const void*> handed;
  {
    auto pool = BufferPool::Create([&](const void* p) { freed.push_back(p); }, /*max_free=*/2);
    {
      std::vector<BufferPool::Lease> held;
      for (int i = 0; i < 3; ++i) {
        held.push_back(pool->Acquire(64));
        handed.insert(held.back().data());
      }
    }
    EXPECT_EQ(pool->idle(), 2u);
    ASSERT_EQ(freed.size(), 1u) << "the third returned buffer is past the bound";
    EXPECT_TRUE(handed.count(freed[0]));
  }
  EXPECT_EQ(freed.size(), 3u) << "the idle ones go with the pool";
  EXPECT_EQ(std::set<const void*>(freed.begin(), freed.end()), handed);
}

TEST(BufferPoolTest, ALeaseKeepsItsPoolAliveAndConcurrentJobsGetDistinctBuffers) {
  std::vector<const void*> freed;
  BufferPool::Lease outlives;
  {
    auto pool = BufferPool::Create([&](const void* p) { freed.push_back(p); });
    outlives = pool->Acquire(128);
  }
  EXPECT_TRUE(freed.empty());
  outlives = BufferPool::Lease();  // Returned, then freed with the pool.
  EXPECT_EQ(freed.size(), 1u);

  auto pool = BufferPool::Create();
  std::vector<std::thread> threads;
  std::vector<int> clashes(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        BufferPool::Lease l = pool->Acquire(256);
        auto* p = static_cast<std::uint32_t*>(l.data());
        *p = static_cast<std::uint32_t>(t * 1000 + i);
        std::this_thread::yield();
        clashes[t] += *p != static_cast<std::uint32_t>(t * 1000 + i);
      }
    });
  }
  for (std::thread& th : threads) {
    th.join();
  }
  for (int c : clashes) {
    EXPECT_EQ(c, 0) << "two jobs held one buffer";
  }
  EXPECT_LE(pool->idle(), 4u);
  EXPECT_GE(pool->idle(), 1u);
}

}  // namespace
}  // namespace sluice::internal
