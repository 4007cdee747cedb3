// The UCX context and the one thread that drives its worker: every call on
// the worker, its endpoints and their remote keys runs on that thread
// (UCS_THREAD_MODE_SINGLE); other threads hand it work with Run. Memory
// mapping is a context call and may run on any thread.
#ifndef SLUICE_TRANSFER_UCX_UCX_WORKER_H_
#define SLUICE_TRANSFER_UCX_UCX_WORKER_H_

#include <ucp/api/ucp.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sluice/status.h"

#include "common/mutex.h"
#include "common/net.h"

namespace sluice::internal {

// The context: destroyed when the worker and every mapping made with it
// are gone.
class UcxContext {
 public:
  // Errors: kUnavailable with UCX's message.
  static Result<std::shared_ptr<UcxContext>> Create();
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context_h get() const { return ctx_; }

 private:
  UcxContext() = default;
  ucp_context_h ctx_ = nullptr;
};

// Memory mapped into the context; unmapped when dropped.
class UcxMemory {
 public:
  // Maps [addr, addr + length) with remote read and/or write access and
  // packs its remote key into `*rkey`. Errors: kUnavailable with UCX's
  // message.
  static Result<std::shared_ptr<UcxMemory>> Map(std::shared_ptr<UcxContext> ctx, void* addr,
                                                std::size_t length, bool remote_read,
                                                bool remote_write, std::string* rkey);
  ~UcxMemory();

 private:
  std::shared_ptr<UcxContext> ctx_;
  ucp_mem_h memh_ = nullptr;
};

class UcxWorker {
 public:
  using Work = std::function<void(ucp_worker_h)>;

  // Creates the worker and starts its thread. Errors: kUnavailable.
  static Result<std::shared_ptr<UcxWorker>> Start(std::shared_ptr<UcxContext> ctx);
  // Runs what is queued, then stops the thread and destroys the worker.
  // Never called on the worker's own thread (work holds no reference).
  ~UcxWorker();

  // The worker's address, for peers to connect to.
  const std::string& address() const { return address_; }

  // Queues `work` for the worker's thread and wakes it. Work queued before
  // the destructor runs, in order.
  void Run(Work work);

  // Runs `tick` on the worker's thread about every `period` (after each
  // wake-up, at least that often): for deadlines.
  void SetTick(std::function<void()> tick);

 private:
  UcxWorker() = default;
  void Loop();

  std::shared_ptr<UcxContext> ctx_;
  ucp_worker_h worker_ = nullptr;
  int worker_fd_ = -1;  // The worker's event fd (ucp_worker_get_efd).
  UniqueFd wake_;       // An eventfd Run writes.
  std::string address_;
  Mutex mu_;
  std::vector<Work> queue_ SLUICE_GUARDED_BY(mu_);
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  std::function<void()> tick_ SLUICE_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_UCX_UCX_WORKER_H_
