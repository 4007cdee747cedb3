#include "common/elastic_pool.h"

#include <atomic>
#include <future>

#include "gtest/gtest.h"

#include "common/testing/eventually.h"

namespace sluice::internal {
namespace {

using namespace std::chrono_literals;

TEST(ElasticPoolTest, ABlockedTaskNeverDelaysAnother) {
  ElasticPool pool("test-pool", 8, 10s);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::promise<void> second_ran;
  ASSERT_TRUE(pool.Run([gate] { gate.wait(); }).ok());
  ASSERT_TRUE(pool.Run([&] { second_ran.set_value(); }).ok());
  EXPECT_EQ(second_ran.get_future().wait_for(5s), std::future_status::ready)
      << "the second task waited behind the blocked one";
  EXPECT_EQ(pool.threads(), 2u);
  release.set_value();
}

TEST(ElasticPoolTest, SequentialTasksReuseOneThread) {
  ElasticPool pool("test-pool", 8, 10s);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(Eventually([&] { return pool.idle_threads() == pool.threads(); }));
    std::promise<void> done;
    ASSERT_TRUE(pool.Run([&] { done.set_value(); }).ok());
    ASSERT_EQ(done.get_future().wait_for(5s), std::future_status::ready);
  }
  EXPECT_EQ(pool.threads(), 1u) << "a waiting idle thread took every task";
}

TEST(ElasticPoolTest, IdleThreadsExitAfterTheTimeout) {
  ElasticPool pool("test-pool", 8, 20ms);
  std::atomic<int> ran{0};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(pool.Run([&] { ++ran; }).ok());
  }
  EXPECT_TRUE(Eventually([&] { return ran == 3 && pool.threads() == 0; }));
  ASSERT_TRUE(pool.Run([&] { ++ran; }).ok()) << "a new thread starts after all exited";
  EXPECT_TRUE(Eventually([&] { return ran == 4; }));
}

TEST(ElasticPoolTest, RefusesATaskWhenEveryThreadIsBusy) {
  ElasticPool pool("test-pool", 2, 10s);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  ASSERT_TRUE(pool.Run([gate] { gate.wait(); }).ok());
  ASSERT_TRUE(pool.Run([gate] { gate.wait(); }).ok());
  const Status s = pool.Run([] {});
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("2 threads"), std::string::npos) << s.ToString();
  release.set_value();
  EXPECT_TRUE(Eventually([&] { return pool.idle_threads() > 0; }));
  std::promise<void> ran;
  ASSERT_TRUE(pool.Run([&] { ran.set_value(); }).ok());
  EXPECT_EQ(ran.get_future().wait_for(5s), std::future_status::ready);
}

TEST(ElasticPoolTest, DestructionRunsEveryAcceptedTask) {
  std::atomic<int> ran{0};
  {
    ElasticPool pool("test-pool", 4, 10s);
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(pool.Run([&] {
                        std::this_thread::sleep_for(5ms);
                        ++ran;
                      })
                      .ok());
    }
  }
  EXPECT_EQ(ran, 4);
}

}  // namespace
}  // namespace sluice::internal
