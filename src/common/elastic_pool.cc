#include "common/elastic_pool.h"

#include <pthread.h>

#include "common/mutex.h"

namespace sluice::internal {

ElasticPool::ElasticPool(std::string name, std::size_t max_threads,
                         std::chrono::milliseconds idle_timeout)
    : name_(std::move(name)), max_threads_(max_threads), idle_timeout_(idle_timeout) {}

ElasticPool::~ElasticPool() {
  std::list<Worker> workers;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    workers.swap(workers_);
  }
  cv_.NotifyAll();
  for (Worker& w : workers) {
    w.thread.join();  // Each drains the accepted tasks before it exits.
  }
}

Status ElasticPool::Run(std::function<void()> task) {
  MutexLock lock(mu_);
  if (stopping_) {
    return FailedPreconditionError(name_ + ": pool is shutting down");
  }
  ReapLocked();
  // Every idle worker takes one accepted task: start a thread when the
  // idle ones are all spoken for.
  const bool start = idle_ <= tasks_.size();
  if (start && live_ >= max_threads_) {
    return ResourceExhaustedError(name_ + ": all " + std::to_string(max_threads_) +
                                  " threads are busy");
  }
  tasks_.push_back(std::move(task));
  if (!start) {
    cv_.NotifyOne();
    return Status::Ok();
  }
  Worker& w = workers_.emplace_back();
  ++live_;
  w.thread = std::thread([this, &w] { Loop(&w); });
  return Status::Ok();
}

std::size_t ElasticPool::threads() const {
  MutexLock lock(mu_);
  return live_;
}

std::size_t ElasticPool::idle_threads() const {
  MutexLock lock(mu_);
  return idle_;
}

void ElasticPool::ReapLocked() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (it->exited) {
      it->thread.join();  // Already past its last statement that touches *this.
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
}

void ElasticPool::Loop(Worker* self) {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  MutexLock lock(mu_);
  while (true) {
    if (!tasks_.empty()) {
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.Unlock();
      task();
      task = nullptr;  // Destroy what it captured before waiting again.
      lock.Lock();
      continue;
    }
    if (stopping_) {
      break;
    }
    ++idle_;
    const bool woken = cv_.WaitFor(lock, idle_timeout_, [this]() SLUICE_REQUIRES(mu_) {
      return stopping_ || !tasks_.empty();
    });
    --idle_;
    if (!woken) {
      break;  // Idle for the whole timeout.
    }
  }
  --live_;
  self->exited = true;
}

}  // namespace sluice::internal
