#include "transfer/write_order.h"

#include "common/mutex.h"

namespace sluice::internal {

WriteOrder::WriteOrder(std::function<void(std::string&&)> send) : send_(std::move(send)) {
  epochs_.push_back(Epoch{});
}

std::uint64_t WriteOrder::BeginWrite() {
  MutexLock lock(mu_);
  ++epochs_.back().pending;
  return epochs_.back().id;
}

void WriteOrder::EndWrite(std::uint64_t epoch) {
  MutexLock lock(mu_);
  for (Epoch& e : epochs_) {
    if (e.id == epoch) {
      --e.pending;
      break;
    }
  }
  DrainLocked();
}

void WriteOrder::Notify(std::string message) {
  MutexLock lock(mu_);
  if (epochs_.size() == 1 && epochs_.back().pending == 0) {
    send_(std::move(message));
    return;
  }
  epochs_.back().notifies.push_back(std::move(message));
  epochs_.push_back(Epoch{epochs_.back().id + 1, 0, {}});
}

void WriteOrder::DrainLocked() {
  while (epochs_.size() > 1 && epochs_.front().pending == 0) {
    for (std::string& m : epochs_.front().notifies) {
      send_(std::move(m));
    }
    epochs_.pop_front();
  }
}

}  // namespace sluice::internal
