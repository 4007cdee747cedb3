// Threads that run shm copies, so Submit() returns at once and completions
// run off the caller's thread. Large ops arrive cut into chunks, which lets
// several threads copy one op in parallel.
#ifndef SLUICE_TRANSFER_SHM_COPY_POOL_H_
#define SLUICE_TRANSFER_SHM_COPY_POOL_H_

#include <atomic>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "transfer/batch.h"
#include "transfer/shm/shm_peer.h"

namespace sluice::internal {

struct CopyJob {
  BatchState* batch = nullptr;
  std::uint32_t op_index = 0;
  bool write = true;
  char* local = nullptr;
  std::shared_ptr<PeerMapping> mapping;  // Keeps a mapped target alive.
  char* mapped = nullptr;                // Inside `mapping`, or null for process_vm.
  std::int32_t pid = 0;
  std::uint64_t remote_addr = 0;
  std::uint64_t length = 0;
  std::shared_ptr<const std::atomic<bool>> peer_alive;
};

class CopyPool {
 public:
  explicit CopyPool(int threads);
  ~CopyPool();  // Fails queued jobs with kCancelled, joins.

  // Thread-safe.
  void Submit(std::vector<CopyJob>& jobs);

 private:
  void Run();

  Mutex mu_;
  CondVar cv_;
  std::deque<CopyJob> jobs_ SLUICE_GUARDED_BY(mu_);
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_SHM_COPY_POOL_H_
