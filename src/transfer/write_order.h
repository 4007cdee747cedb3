// Write-then-notify ordering for one peer. Writes are counted in epochs; a
// Notify closes the open epoch and is sent only when every write of that
// epoch and all earlier ones has ended, so the peer's handler runs after the
// bytes landed. Thread-safe; `send` is called with the lock held (it only
// queues), which keeps notifies in call order.
#ifndef SLUICE_TRANSFER_WRITE_ORDER_H_
#define SLUICE_TRANSFER_WRITE_ORDER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "common/mutex.h"

namespace sluice::internal {

class WriteOrder {
 public:
  explicit WriteOrder(std::function<void(std::string&&)> send);

  std::uint64_t BeginWrite();
  void EndWrite(std::uint64_t epoch);
  void Notify(std::string message);

 private:
  struct Epoch {
    std::uint64_t id = 0;
    std::int64_t pending = 0;
    std::vector<std::string> notifies;  // Sent once this epoch drains.
  };
  void DrainLocked() SLUICE_REQUIRES(mu_);

  std::function<void(std::string&&)> send_;
  Mutex mu_;
  std::deque<Epoch> epochs_ SLUICE_GUARDED_BY(mu_);  // back() is the open epoch.
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_WRITE_ORDER_H_
