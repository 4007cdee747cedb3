#include "transfer/shm/copy_pool.h"

#include <pthread.h>

#include "common/mutex.h"

namespace sluice::internal {

CopyPool::CopyPool(int threads) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this, i] {
      const std::string name = "sluice-shm-" + std::to_string(i);
      pthread_setname_np(pthread_self(), name.c_str());
      Run();
    });
  }
}

CopyPool::~CopyPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  for (std::thread& t : threads_) {
    t.join();
  }
  for (CopyJob& j : jobs_) {
    j.batch->UnitDone(j.op_index,
                      Status(StatusCode::kCancelled, "transfer engine is shutting down"));
  }
}

void CopyPool::Submit(std::vector<CopyJob>& jobs) {
  {
    MutexLock lock(mu_);
    for (CopyJob& j : jobs) {
      jobs_.push_back(std::move(j));
    }
  }
  jobs.clear();
  cv_.NotifyAll();
}

void CopyPool::Run() {
  MutexLock lock(mu_);
  while (true) {
    cv_.Wait(lock, [this]() SLUICE_REQUIRES(mu_) { return stopping_ || !jobs_.empty(); });
    if (stopping_) {
      return;
    }
    CopyJob job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.Unlock();
    Status s;
    if (!job.peer_alive->load(std::memory_order_acquire)) {
      s = UnavailableError("peer is gone", FailureScope::kEndpoint);
    } else {
      s = ShmCopy(job.write, job.local, job.mapped, job.pid, job.remote_addr, job.length);
    }
    BatchState* batch = job.batch;
    const std::uint32_t op = job.op_index;
    job = CopyJob{};  // Drop the mapping reference before completing.
    batch->UnitDone(op, s);
    lock.Lock();
  }
}

}  // namespace sluice::internal
