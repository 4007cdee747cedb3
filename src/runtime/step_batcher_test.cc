// Step-level batching of concurrent jobs: jobs on their own threads hand
// their steps to one batcher; steps run in batches (several jobs' steps at
// once), each job lands within float32 rounding of itself alone, a job of
// another size runs beside them in batches of its own shape (alone: bit
// for bit), and a job joining late joins at a step boundary.
#include "runtime/step_batcher.h"

#include <cmath>
#include <latch>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace sluice::internal {
namespace {

namespace ref = sluice::reference;

struct Job {
  ref::Request r;
  std::vector<float> cond, x, alone;
  int start_after = 0;  // Steps of job 0 before this one starts.
};

Job MakeJob(const std::string& prompt, const std::string& size, int seed) {
  Job j;
  auto r = ref::ParseRequest(R"({"prompt":")" + prompt + R"(","size":")" + size +
                                 R"(","steps":8,"seed":)" + std::to_string(seed) + "}",
                             8, 4.0f);
  EXPECT_TRUE(r.ok());
  j.r = *r;
  j.cond = ref::EncodeCondition(j.r);
  j.x = j.alone = ref::InitialNoise(j.r);
  for (int i = 0; i < j.r.steps; ++i) {
    ref::DenoiseStep(j.r, j.cond.data(), i, j.alone);
  }
  return j;
}

TEST(StepBatcherTest, ConcurrentJobsShareStepsAndLandAsTheyWouldAlone) {
  std::vector<Job> jobs;
  jobs.push_back(MakeJob("a large red circle on the left on a blue background", "128x128", 1));
  jobs.push_back(MakeJob("a small green square at the top", "128x128", 2));
  jobs.push_back(MakeJob("a yellow triangle on the right", "128x128", 3));
  jobs.push_back(MakeJob("a blue diamond in the centre", "64x64", 4));  // Another shape.
  jobs.push_back(MakeJob("a white circle at the bottom", "128x128", 5));
  jobs[4].start_after = 3;  // Joins while the others run.
  StepBatcher::Options o;
  o.max_batch = 8;
  o.gather = std::chrono::seconds(2);  // Every member's step arrives well within it.
  StepBatcher batcher(o);
  std::latch joined(4);
  std::atomic<int> first_steps{0};
  std::vector<int> largest(jobs.size(), 0);
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    threads.emplace_back([&, k] {
      Job& j = jobs[k];
      if (j.start_after > 0) {
        joined.wait();
        while (first_steps.load() < j.start_after) {
          std::this_thread::yield();
        }
      }
      StepBatcher::Member member(&batcher, j.r.latent());
      if (j.start_after == 0) {
        joined.arrive_and_wait();  // Every early job is a member before any steps.
      }
      for (int i = 0; i < j.r.steps; ++i) {
        ref::SampleStep s{&j.r, j.cond.data(), i, &j.x, nullptr, nullptr, nullptr, {}};
        largest[k] = std::max(largest[k], batcher.Step(s));
        if (k == 0) {
          ++first_steps;
        }
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    float worst = 0;
    for (std::size_t i = 0; i < jobs[k].x.size(); ++i) {
      worst = std::max(worst, std::fabs(jobs[k].x[i] - jobs[k].alone[i]));
    }
    EXPECT_LT(worst, 1e-3f) << "job " << k;
  }
  EXPECT_EQ(jobs[3].x, jobs[3].alone) << "alone in its shape's group: DenoiseStep's bits";
  EXPECT_GE(largest[0], 3) << "the 128x128 jobs shared their steps";
  EXPECT_GE(largest[4], 2) << "the late job joined the running batch";
  const StepBatcher::Stats s = batcher.stats();
  EXPECT_EQ(s.steps, 5u * 8u);
  EXPECT_LT(s.batches, s.steps) << "every step ran alone";
  EXPECT_GE(s.largest, 4);
}

TEST(StepBatcherTest, ALoneJobRunsItsStepsAtOnceAsDenoiseStepDoes) {
  Job j = MakeJob("a large red circle on the left on a blue background", "64x64", 9);
  StepBatcher::Options o;
  o.gather = std::chrono::seconds(30);  // Never waited out: it is the only member.
  StepBatcher batcher(o);
  StepBatcher::Member member(&batcher, j.r.latent());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < j.r.steps; ++i) {
    ref::SampleStep s{&j.r, j.cond.data(), i, &j.x, nullptr, nullptr, nullptr, {}};
    EXPECT_EQ(batcher.Step(s), 1);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(j.x, j.alone);
}

}  // namespace
}  // namespace sluice::internal
