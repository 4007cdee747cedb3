// Engine-side state of one submitted batch. An op is cut into units (tcp
// slices or shm chunks); the batch finishes when every unit has reported.
// Units report from any thread; the completion (callback, waiters, unpinning
// local regions) runs exactly once, on an I/O thread.
#ifndef SLUICE_TRANSFER_BATCH_H_
#define SLUICE_TRANSFER_BATCH_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "sluice/transfer/engine.h"

#include "common/mutex.h"
#include "transfer/region_table.h"

namespace sluice::internal {

class EventLoop;
class WriteOrder;

class BatchState : public TransferBatch {
 public:
  struct Op {
    LocalRegion* region = nullptr;  // Pinned until the batch finishes.
    WriteOrder* order = nullptr;    // Set for writes: released when the op ends.
    std::uint64_t epoch = 0;
    std::atomic<std::uint32_t> units{0};
  };

  // `finisher` runs the completion when the last unit is released by the
  // submitting thread (completions never run inline from Submit()).
  static std::shared_ptr<BatchState> Create(std::size_t num_ops, BatchCallback callback,
                                            EventLoop* finisher);

  Op& op(std::size_t i) { return ops_[i]; }
  std::size_t num_ops() const { return num_ops_; }

  // Arms the batch with `total` units plus a guard held by the submitter;
  // `self` keeps it alive until it finishes. A batch never armed is simply
  // dropped (Submit rejected it up front).
  void Arm(std::uint64_t total, std::shared_ptr<BatchState> self);
  // Reports one unit of op `op_index`; the first error becomes the status.
  void UnitDone(std::uint32_t op_index, const Status& s);
  // The submitter's guard: called once after every unit was dispatched.
  void ReleaseGuard();

  static const BatchState* From(const TransferBatch* b) {
    return static_cast<const BatchState*>(b);
  }
  bool IsDone() const;
  Status FinalStatus() const;
  Status WaitFor(std::chrono::milliseconds timeout) const;

 private:
  BatchState() = default;
  void Finish();
  void Fail(const Status& s);

  std::unique_ptr<Op[]> ops_;
  std::size_t num_ops_ = 0;
  BatchCallback callback_;
  EventLoop* finisher_ = nullptr;
  std::shared_ptr<BatchState> self_;  // Keeps the batch alive while units run.
  std::atomic<std::uint64_t> remaining_{0};
  std::atomic<bool> failed_{false};

  mutable Mutex mu_;
  mutable CondVar cv_;
  bool done_ SLUICE_GUARDED_BY(mu_) = false;
  Status status_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_BATCH_H_
