// WorkSchedule: work spent on pieces of input as they arrive, the way a
// device works through them — a piece's work starts once it arrived and
// the previous piece's work is done — for stand-ins that spend time by
// sleeping (profile stages, benchmarks). A sleep overshoots by tens of
// microseconds; the schedule is kept in time points, so the overshoot is
// not added once per piece.
//
// Thread safety: one thread at a time.
#ifndef SLUICE_COMMON_WORK_SCHEDULE_H_
#define SLUICE_COMMON_WORK_SCHEDULE_H_

#include <chrono>
#include <optional>

namespace sluice::internal {

class WorkSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  // `waiting_within`: a piece handed over this soon after Asking() was
  // already there.
  explicit WorkSchedule(Clock::duration waiting_within = std::chrono::microseconds(50))
      : waiting_within_(waiting_within) {}

  // Call right before waiting for the next piece.
  void Asking() { asked_ = Clock::now(); }

  // The next piece is here: sleeps until its work, `work` long, is done
  // (after the previous piece's). A piece handed over within
  // `waiting_within` of Asking() was already waiting: it is taken to have
  // arrived when the previous work ended, not when this thread woke from
  // that sleep. Returns when the work is done (the schedule's time point).
  Clock::time_point Work(Clock::duration work);

 private:
  Clock::duration waiting_within_;
  Clock::time_point asked_ = Clock::now();
  std::optional<Clock::time_point> done_;  // Of the previous piece's work.
};

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_WORK_SCHEDULE_H_
