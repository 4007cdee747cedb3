#include "common/work_schedule.h"

#include <thread>

#include <gtest/gtest.h>

namespace sluice::internal {
namespace {

using namespace std::chrono_literals;
using Clock = WorkSchedule::Clock;

// Pieces already waiting: each one's work follows the previous one's on
// the schedule, whatever the sleeps overshot.
TEST(WorkScheduleTest, WaitingPiecesFollowOneAnotherExactly) {
  WorkSchedule s(/*waiting_within=*/1s);
  const Clock::time_point first = s.Work(2ms);
  Clock::time_point last = first;
  for (int i = 0; i < 5; ++i) {
    s.Asking();
    last = s.Work(2ms);
  }
  EXPECT_EQ(last - first, 10ms);
  EXPECT_GE(Clock::now(), last);
}

// A piece that arrives after the previous work ended starts when it
// arrives.
TEST(WorkScheduleTest, ALatePieceStartsWhenItArrives) {
  WorkSchedule s(/*waiting_within=*/1ms);
  const Clock::time_point first = s.Work(1ms);
  s.Asking();
  std::this_thread::sleep_for(20ms);  // Waiting for the piece.
  const Clock::time_point arrived = Clock::now();
  const Clock::time_point done = s.Work(1ms);
  EXPECT_GE(done, arrived + 1ms);
  EXPECT_GE(done - first, 21ms);
}

// The first piece always starts when it is handed over.
TEST(WorkScheduleTest, TheFirstPieceStartsWhenHandedOver) {
  WorkSchedule s(/*waiting_within=*/1s);
  std::this_thread::sleep_for(5ms);
  const Clock::time_point handed = Clock::now();
  EXPECT_GE(s.Work(3ms), handed + 3ms);
}

}  // namespace
}  // namespace sluice::internal
