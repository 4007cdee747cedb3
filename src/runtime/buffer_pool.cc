#include "runtime/buffer_pool.h"

#include <algorithm>
#include <cstring>

namespace sluice::internal {

BufferPool::Lease& BufferPool::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    if (pool_ != nullptr && buffer_ != nullptr) {
      pool_->Return(std::move(buffer_), capacity_);
    }
    pool_ = std::move(o.pool_);
    buffer_ = std::move(o.buffer_);
    capacity_ = o.capacity_;
    o.capacity_ = 0;
  }
  return *this;
}

BufferPool::Lease::~Lease() {
  if (pool_ != nullptr && buffer_ != nullptr) {
    pool_->Return(std::move(buffer_), capacity_);
  }
}

std::shared_ptr<BufferPool> BufferPool::Create(std::function<void(const void*)> on_free,
                                               std::size_t max_free) {
  return std::shared_ptr<BufferPool>(new BufferPool(std::move(on_free), max_free));
}

BufferPool::~BufferPool() {
  // Leases hold the pool: none is out once it dies.
  for (Idle& i : idle_) {
    if (on_free_) {
      on_free_(i.buffer.get());
    }
  }
}

BufferPool::Lease BufferPool::Acquire(std::size_t bytes) {
  Lease l;
  l.pool_ = shared_from_this();
  {
    MutexLock lock(mu_);
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if (it->capacity >= bytes && (best == idle_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != idle_.end()) {
      l.buffer_ = std::move(best->buffer);
      l.capacity_ = best->capacity;
      idle_.erase(best);
      return l;
    }
  }
  const std::size_t capacity = std::max<std::size_t>(bytes, 8);
  l.buffer_.reset(new std::byte[capacity]);
  std::memset(l.buffer_.get(), 0, capacity);  // Faults every page in now, once.
  l.capacity_ = capacity;
  return l;
}

void BufferPool::Return(std::unique_ptr<std::byte[]> buffer, std::size_t capacity) {
  {
    MutexLock lock(mu_);
    if (idle_.size() < max_free_) {
      idle_.push_back({std::move(buffer), capacity});
      return;
    }
  }
  if (on_free_) {
    on_free_(buffer.get());
  }
}

std::size_t BufferPool::idle() const {
  MutexLock lock(mu_);
  return idle_.size();
}

}  // namespace sluice::internal
