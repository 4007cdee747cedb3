// The public sluice::StepBatcher on plain items: members' steps of one key
// run together and each gets its own result, keys never share a batch,
// max_batch caps one, a member that leaves is not waited for, and what the
// batch's run returns reaches every step of it.
#include <barrier>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/runtime/step_batcher.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

struct Square {
  int in = 0;
  int out = 0;
};

// The batches run (each a list of inputs), and a run squaring every item.
struct Recorder {
  std::mutex mu;
  std::vector<std::vector<int>> batches;
  Status fail;  // Returned by the next run, then cleared.
  StepBatcher<Square>::Run Run() {
    return [this](std::span<Square* const> items) {
      std::lock_guard<std::mutex> lock(mu);
      std::vector<int> ins;
      for (Square* s : items) {
        ins.push_back(s->in);
        s->out = s->in * s->in;
      }
      batches.push_back(std::move(ins));
      return std::exchange(fail, Status::Ok());
    };
  }
};

// `members` threads joining `key_of(m)`, each stepping in = m * 100 + i for
// `steps[m]` steps once all have joined; the batch sizes each saw.
std::vector<std::vector<int>> RunMembers(StepBatcher<Square>& b, std::vector<int> steps,
                                         std::uint64_t (*key_of)(int)) {
  const int n = static_cast<int>(steps.size());
  std::vector<std::vector<int>> sizes(n);
  std::barrier joined(n);
  std::vector<std::thread> threads;
  for (int m = 0; m < n; ++m) {
    threads.emplace_back([&, m] {
      StepBatcher<Square>::Member member(&b, key_of(m));
      joined.arrive_and_wait();
      for (int i = 0; i < steps[m]; ++i) {
        Square s{m * 100 + i, 0};
        Result<int> got = b.Step(key_of(m), s);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        EXPECT_EQ(s.out, s.in * s.in);
        sizes[m].push_back(*got);
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  return sizes;
}

std::uint64_t OneKey(int) {
  return 7;
}
std::uint64_t Parity(int m) {
  return static_cast<std::uint64_t>(m % 2);
}

TEST(PublicStepBatcherTest, MembersStepsRunTogetherEachWithItsResult) {
  Recorder rec;
  StepBatcher<Square> b(rec.Run(), {.max_batch = 4, .gather = 5s});  // Members, not the clock.
  const auto sizes = RunMembers(b, {5, 5, 5}, OneKey);
  for (const std::vector<int>& s : sizes) {
    EXPECT_EQ(s, std::vector<int>(5, 3));
  }
  ASSERT_EQ(rec.batches.size(), 5u);
  EXPECT_EQ(b.stats().steps, 15u);
  EXPECT_EQ(b.stats().largest, 3);
}

TEST(PublicStepBatcherTest, AMemberThatLeavesIsNotWaitedFor) {
  Recorder rec;
  StepBatcher<Square> b(rec.Run(), {.max_batch = 4, .gather = 5s});
  const auto t0 = std::chrono::steady_clock::now();
  const auto sizes = RunMembers(b, {2, 5}, OneKey);
  // Waiting 5 s for the member that left would take 15 s.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s);
  EXPECT_EQ(sizes[1], (std::vector<int>{2, 2, 1, 1, 1}));
}

TEST(PublicStepBatcherTest, KeysNeverShareABatchAndMaxBatchCapsOne) {
  Recorder rec;
  StepBatcher<Square> b(rec.Run(), {.max_batch = 2, .gather = 200ms});
  RunMembers(b, {3, 3, 3, 3}, Parity);
  std::size_t steps = 0;
  for (const std::vector<int>& batch : rec.batches) {
    EXPECT_LE(batch.size(), 2u);
    for (int in : batch) {
      EXPECT_EQ((in / 100) % 2, (batch.front() / 100) % 2) << "keys mixed in one batch";
    }
    steps += batch.size();
  }
  EXPECT_EQ(steps, 12u);
}

TEST(PublicStepBatcherTest, WhatTheRunReturnsReachesEveryStepOfItsBatch) {
  Recorder rec;
  rec.fail = ResourceExhaustedError("out of device memory");
  StepBatcher<Square> b(rec.Run(), {.max_batch = 4, .gather = 5s});
  std::barrier joined(2);
  std::vector<Status> first(2);
  std::vector<int> second(2);
  std::vector<std::thread> threads;
  for (int m = 0; m < 2; ++m) {
    threads.emplace_back([&, m] {
      StepBatcher<Square>::Member member(&b, 1);
      joined.arrive_and_wait();
      Square s{m, 0};
      first[m] = b.Step(1, s).status();
      Square t{m + 10, 0};
      Result<int> n = b.Step(1, t);
      second[m] = n.ok() ? *n : -1;
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  for (int m = 0; m < 2; ++m) {
    EXPECT_EQ(first[m].code(), StatusCode::kResourceExhausted) << first[m].ToString();
    EXPECT_EQ(second[m], 2);
  }
  // A step outside any membership runs alone at once.
  Square lone{3, 0};
  Result<int> n = b.Step(99, lone);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  EXPECT_EQ(lone.out, 9);
}

}  // namespace
}  // namespace sluice
