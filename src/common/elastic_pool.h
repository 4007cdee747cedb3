// Runs each task at once: on an idle thread when one waits, else on a new
// one. Tasks never queue behind each other — a task may block for long (a
// consumer waiting for its producer) without delaying any other — while a
// steady stream of tasks reuses threads instead of paying a thread start
// each. Threads idle for `idle_timeout` exit.
#ifndef SLUICE_COMMON_ELASTIC_POOL_H_
#define SLUICE_COMMON_ELASTIC_POOL_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <string>
#include <thread>

#include "sluice/status.h"

#include "common/mutex.h"

namespace sluice::internal {

class ElasticPool {
 public:
  // `name` (up to 15 characters) names the threads; `max_threads` >= 1.
  ElasticPool(std::string name, std::size_t max_threads, std::chrono::milliseconds idle_timeout);
  // Runs the tasks already accepted, then joins every thread. REQUIRES: the
  // tasks end by themselves (the owner tells them to stop first).
  ~ElasticPool();

  ElasticPool(const ElasticPool&) = delete;
  ElasticPool& operator=(const ElasticPool&) = delete;

  // Starts `task` on an idle thread or a new one; returns without waiting.
  // Errors: kResourceExhausted when `max_threads` threads are all busy (the
  // task is not run; the caller fails its request or retries later),
  // kFailedPrecondition after destruction began. Thread-safe.
  Status Run(std::function<void()> task);

  // Threads alive now (busy or idle), and those of them idle. Thread-safe.
  std::size_t threads() const;
  std::size_t idle_threads() const;

 private:
  struct Worker {
    std::thread thread;
    bool exited = false;  // Guarded by the pool's mu_: the thread is past its last use of *this.
  };
  void Loop(Worker* self);
  void ReapLocked() SLUICE_REQUIRES(mu_);

  const std::string name_;
  const std::size_t max_threads_;
  const std::chrono::milliseconds idle_timeout_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ SLUICE_GUARDED_BY(mu_);  // Accepted, not yet picked up.
  std::list<Worker> workers_ SLUICE_GUARDED_BY(mu_);
  std::size_t live_ SLUICE_GUARDED_BY(mu_) = 0;  // Workers not yet exited.
  std::size_t idle_ SLUICE_GUARDED_BY(mu_) = 0;  // Workers waiting for a task.
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_ELASTIC_POOL_H_
