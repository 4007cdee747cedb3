#include "common/work_schedule.h"

#include <algorithm>
#include <thread>

namespace sluice::internal {

WorkSchedule::Clock::time_point WorkSchedule::Work(Clock::duration work) {
  const Clock::time_point got = Clock::now();
  const bool waited = !done_ || got - asked_ >= waiting_within_;
  const Clock::time_point start = waited ? std::max(done_.value_or(got), got) : *done_;
  done_ = start + work;
  std::this_thread::sleep_until(*done_);
  return *done_;
}

}  // namespace sluice::internal
