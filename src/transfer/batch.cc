#include "transfer/batch.h"

#include "common/mutex.h"
#include "transfer/control/event_loop.h"
#include "transfer/write_order.h"

namespace sluice::internal {

std::shared_ptr<BatchState> BatchState::Create(std::size_t num_ops, BatchCallback callback,
                                               EventLoop* finisher) {
  std::shared_ptr<BatchState> b(new BatchState());
  b->ops_.reset(new Op[num_ops]);
  b->num_ops_ = num_ops;
  b->callback_ = std::move(callback);
  b->finisher_ = finisher;
  return b;
}

void BatchState::Arm(std::uint64_t total, std::shared_ptr<BatchState> self) {
  self_ = std::move(self);
  remaining_.store(total + 1, std::memory_order_relaxed);
}

void BatchState::Fail(const Status& s) {
  if (!failed_.exchange(true, std::memory_order_acq_rel)) {
    MutexLock lock(mu_);
    status_ = s;
  }
}

void BatchState::UnitDone(std::uint32_t op_index, const Status& s) {
  if (!s.ok()) {
    Fail(s);
  }
  Op& op = ops_[op_index];
  if (op.units.fetch_sub(1, std::memory_order_acq_rel) == 1 && op.order != nullptr) {
    op.order->EndWrite(op.epoch);
  }
  if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    Finish();
  }
}

void BatchState::ReleaseGuard() {
  if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    finisher_->Post([self = self_] { self->Finish(); });
  }
}

void BatchState::Finish() {
  for (std::size_t i = 0; i < num_ops_; ++i) {
    if (ops_[i].region != nullptr) {
      RegionTableLocal::Unpin(ops_[i].region);
    }
  }
  Status final_status;
  {
    MutexLock lock(mu_);
    done_ = true;
    final_status = status_;
  }
  cv_.NotifyAll();
  if (callback_) {
    BatchCallback cb = std::move(callback_);
    cb(final_status);
  }
  std::shared_ptr<BatchState> keep = std::move(self_);  // May free *this on return.
}

bool BatchState::IsDone() const {
  MutexLock lock(mu_);
  return done_;
}

Status BatchState::FinalStatus() const {
  MutexLock lock(mu_);
  return done_ ? status_ : FailedPreconditionError("batch is still running");
}

Status BatchState::WaitFor(std::chrono::milliseconds timeout) const {
  MutexLock lock(mu_);
  if (!cv_.WaitFor(lock, timeout, [this]() SLUICE_REQUIRES(mu_) { return done_; })) {
    return DeadlineExceededError("batch not done after " + std::to_string(timeout.count()) +
                                 " ms; it is still running");
  }
  return status_;
}

}  // namespace sluice::internal

namespace sluice {

bool TransferBatch::done() const {
  return internal::BatchState::From(this)->IsDone();
}
Status TransferBatch::status() const {
  return internal::BatchState::From(this)->FinalStatus();
}
Status TransferBatch::Wait(std::chrono::milliseconds timeout) const {
  return internal::BatchState::From(this)->WaitFor(timeout);
}

}  // namespace sluice
