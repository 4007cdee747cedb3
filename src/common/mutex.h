// Annotated locks: sluice::Mutex, SharedMutex, their scoped locks and
// CondVar, carrying Clang's thread-safety attributes so that
// -Wthread-safety checks every SLUICE_GUARDED_BY member and every
// SLUICE_REQUIRES function at compile time. Under other compilers the
// annotations vanish and the classes are thin wrappers over std::mutex,
// std::shared_mutex and std::condition_variable (no extra state beyond a
// scoped lock's "held" flag).
#ifndef SLUICE_COMMON_MUTEX_H_
#define SLUICE_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define SLUICE_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define SLUICE_THREAD_ANNOTATION_(x)
#endif

#define SLUICE_CAPABILITY(x) SLUICE_THREAD_ANNOTATION_(capability(x))
#define SLUICE_SCOPED_CAPABILITY SLUICE_THREAD_ANNOTATION_(scoped_lockable)
#define SLUICE_GUARDED_BY(x) SLUICE_THREAD_ANNOTATION_(guarded_by(x))
#define SLUICE_PT_GUARDED_BY(x) SLUICE_THREAD_ANNOTATION_(pt_guarded_by(x))
#define SLUICE_ACQUIRED_BEFORE(...) SLUICE_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#define SLUICE_ACQUIRED_AFTER(...) SLUICE_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
#define SLUICE_REQUIRES(...) SLUICE_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define SLUICE_REQUIRES_SHARED(...) \
  SLUICE_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
#define SLUICE_ACQUIRE(...) SLUICE_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define SLUICE_ACQUIRE_SHARED(...) SLUICE_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#define SLUICE_RELEASE(...) SLUICE_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define SLUICE_RELEASE_SHARED(...) SLUICE_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
#define SLUICE_RELEASE_GENERIC(...) \
  SLUICE_THREAD_ANNOTATION_(release_generic_capability(__VA_ARGS__))
#define SLUICE_TRY_ACQUIRE(...) SLUICE_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#define SLUICE_EXCLUDES(...) SLUICE_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define SLUICE_ASSERT_CAPABILITY(x) SLUICE_THREAD_ANNOTATION_(assert_capability(x))
#define SLUICE_RETURN_CAPABILITY(x) SLUICE_THREAD_ANNOTATION_(lock_returned(x))
#define SLUICE_NO_THREAD_SAFETY_ANALYSIS SLUICE_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace sluice {

class CondVar;

// A non-recursive exclusive lock. Lock it through MutexLock; Lock/Unlock
// are for the rare hand-over-hand case.
class SLUICE_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // Blocks until this thread holds the lock. REQUIRES: not already held by
  // this thread.
  void Lock() SLUICE_ACQUIRE() { mu_.lock(); }
  // REQUIRES: held by this thread.
  void Unlock() SLUICE_RELEASE() { mu_.unlock(); }
  // Takes the lock if free; returns whether it did. Never blocks.
  bool TryLock() SLUICE_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the lock is held where it cannot see it (a
  // condition predicate, a callback run under the lock). Checks nothing at
  // run time.
  void AssertHeld() const SLUICE_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// A reader/writer lock: ReaderLock shares it, WriterLock excludes all.
class SLUICE_CAPABILITY("shared_mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() SLUICE_ACQUIRE() { mu_.lock(); }
  void Unlock() SLUICE_RELEASE() { mu_.unlock(); }
  void LockShared() SLUICE_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() SLUICE_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a Mutex for its scope. Unlock() and Lock() release and retake it
// inside the scope (for a blocking call that must not run under the lock);
// the destructor releases it only if held.
class SLUICE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) SLUICE_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() SLUICE_RELEASE() {
    if (held_) {
      mu_.Unlock();
    }
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // REQUIRES: held by this scope.
  void Unlock() SLUICE_RELEASE() {
    held_ = false;
    mu_.Unlock();
  }
  // REQUIRES: released by Unlock() in this scope.
  void Lock() SLUICE_ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  friend class CondVar;
  Mutex& mu_;
  bool held_ = true;
};

// Holds a SharedMutex exclusively for its scope.
class SLUICE_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) SLUICE_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~WriterLock() SLUICE_RELEASE() { mu_.Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds a SharedMutex shared for its scope.
class SLUICE_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) SLUICE_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.LockShared(); }
  ~ReaderLock() SLUICE_RELEASE() { mu_.UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

// A condition variable waited on under a MutexLock. Every wait releases the
// lock while blocked and holds it again when it returns; a predicate runs
// under the lock (start it with mu.AssertHeld() so the analysis knows).
// Spurious wake-ups are possible without a predicate.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // REQUIRES: `lock` holds its mutex.
  void Wait(MutexLock& lock) {
    Adopted(lock, [&](std::unique_lock<std::mutex>& u) { cv_.wait(u); });
  }

  // Waits until pred() is true.
  template <typename Pred>
  void Wait(MutexLock& lock, Pred pred) {
    Adopted(lock, [&](std::unique_lock<std::mutex>& u) { cv_.wait(u, pred); });
  }

  // Waits until pred() is true or `timeout` passed; returns pred().
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout, Pred pred) {
    bool result = false;
    Adopted(lock,
            [&](std::unique_lock<std::mutex>& u) { result = cv_.wait_for(u, timeout, pred); });
    return result;
  }

  // Waits for a notification or `timeout`; returns false on timeout.
  template <typename Rep, typename Period>
  bool WaitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout) {
    bool result = false;
    Adopted(lock, [&](std::unique_lock<std::mutex>& u) {
      result = cv_.wait_for(u, timeout) == std::cv_status::no_timeout;
    });
    return result;
  }

  // Waits until pred() is true or `deadline` passed; returns pred().
  template <typename Clock, typename Duration, typename Pred>
  bool WaitUntil(MutexLock& lock, std::chrono::time_point<Clock, Duration> deadline, Pred pred) {
    bool result = false;
    Adopted(lock,
            [&](std::unique_lock<std::mutex>& u) { result = cv_.wait_until(u, deadline, pred); });
    return result;
  }

  // Waits for a notification or `deadline`; returns false on timeout.
  template <typename Clock, typename Duration>
  bool WaitUntil(MutexLock& lock, std::chrono::time_point<Clock, Duration> deadline) {
    bool result = false;
    Adopted(lock, [&](std::unique_lock<std::mutex>& u) {
      result = cv_.wait_until(u, deadline) == std::cv_status::no_timeout;
    });
    return result;
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  // Lends the scope's held std::mutex to a std::unique_lock for one wait.
  template <typename Fn>
  static void Adopted(MutexLock& lock, Fn&& fn) SLUICE_NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> u(lock.mu_.mu_, std::adopt_lock);
    fn(u);
    u.release();
  }

  std::condition_variable cv_;
};

}  // namespace sluice

#endif  // SLUICE_COMMON_MUTEX_H_
