// Host buffers a stage reuses job after job, pre-faulted once: the stand-in
// for the device buffers a real model reads its inputs into and writes its
// outputs from, so no job pays first-touch page faults on its payloads
// (~12-18 us a 4 KiB page on a small host: ~8 ms for a 4 MiB condition).
#ifndef SLUICE_RUNTIME_BUFFER_POOL_H_
#define SLUICE_RUNTIME_BUFFER_POOL_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "common/mutex.h"

namespace sluice::internal {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // A buffer held by one job; it goes back to its pool when the lease
  // ends. Move-only.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&&) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();
    // At least the bytes asked for; 8-byte aligned, touched (zeroed when
    // new; what the last job left otherwise).
    void* data() const { return buffer_.get(); }
    std::size_t capacity() const { return capacity_; }

   private:
    friend class BufferPool;
    std::shared_ptr<BufferPool> pool_;
    std::unique_ptr<std::byte[]> buffer_;
    std::size_t capacity_ = 0;
  };

  // `on_free(data)` runs before a buffer is freed (e.g. the connector's
  // Forget, dropping its registration); it must stay callable for the
  // pool's life. At most `max_free` idle buffers are kept.
  static std::shared_ptr<BufferPool> Create(std::function<void(const void*)> on_free = nullptr,
                                            std::size_t max_free = 16);
  ~BufferPool();

  // The smallest idle buffer of at least `bytes`, or a new one allocated
  // and touched here. One lock per call; no allocation when one is idle.
  // Thread-safe.
  Lease Acquire(std::size_t bytes);

  // Idle buffers now (for tests).
  std::size_t idle() const;

 private:
  BufferPool(std::function<void(const void*)> on_free, std::size_t max_free)
      : on_free_(std::move(on_free)), max_free_(max_free) {}
  void Return(std::unique_ptr<std::byte[]> buffer, std::size_t capacity);

  struct Idle {
    std::unique_ptr<std::byte[]> buffer;
    std::size_t capacity = 0;
  };
  const std::function<void(const void*)> on_free_;
  const std::size_t max_free_;
  mutable Mutex mu_;
  std::vector<Idle> idle_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::internal

#endif  // SLUICE_RUNTIME_BUFFER_POOL_H_
