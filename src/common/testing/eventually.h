// For tests: waits, bounded, for a condition another thread or process
// brings about.
#ifndef SLUICE_COMMON_TESTING_EVENTUALLY_H_
#define SLUICE_COMMON_TESTING_EVENTUALLY_H_

#include <chrono>
#include <thread>

namespace sluice::internal {

// Polls `pred` every millisecond until it holds (true) or `limit` passes
// (false).
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_TESTING_EVENTUALLY_H_
