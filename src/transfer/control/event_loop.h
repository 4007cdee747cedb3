// One epoll event-loop thread. Handlers (sockets) are owned by the loop once
// added and touched only on its thread; other threads reach them by Post().
// Every handler gets OnTick() about every 50 ms, for progress timeouts.
#ifndef SLUICE_TRANSFER_CONTROL_EVENT_LOOP_H_
#define SLUICE_TRANSFER_CONTROL_EVENT_LOOP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sluice/status.h"

#include "common/mutex.h"
#include "common/net.h"

namespace sluice::internal {

using Clock = std::chrono::steady_clock;

class IoHandler {
 public:
  virtual ~IoHandler() = default;
  virtual int fd() const = 0;
  // Readiness events (EPOLLIN/EPOLLOUT/EPOLLERR/EPOLLHUP) on the loop thread.
  virtual void OnEvents(std::uint32_t events) = 0;
  virtual void OnTick(Clock::time_point /*now*/) {}
  // The loop is stopping: fail pending work with kCancelled and close.
  virtual void OnLoopStop() {}
};

class EventLoop {
 public:
  static Result<std::unique_ptr<EventLoop>> Create(std::string name);
  ~EventLoop();  // Stop()s.
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs `task` on the loop thread soon. After Stop() it runs inline.
  void Post(std::function<void()> task);

  // Takes shared ownership of `h` and watches its fd for `events`.
  // Callable from any thread (runs on the loop).
  void Add(std::shared_ptr<IoHandler> h, std::uint32_t events);
  // Loop thread only. Remove() keeps `h` alive until the current dispatch
  // round ends, so events already collected for it stay safe.
  void Modify(IoHandler* h, std::uint32_t events);
  void Remove(IoHandler* h);

  bool InLoop() const { return std::this_thread::get_id() == thread_.get_id(); }

  // Stops the thread: OnLoopStop() for every handler, then posted tasks run.
  // Idempotent.
  void Stop();

 private:
  EventLoop(std::string name, UniqueFd epfd, UniqueFd wakefd);
  void Run();
  void RunTasks();

  std::string name_;
  UniqueFd epfd_;
  UniqueFd wakefd_;
  Mutex mu_;
  std::vector<std::function<void()>> tasks_ SLUICE_GUARDED_BY(mu_);
  bool stopped_ SLUICE_GUARDED_BY(mu_) = false;
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  std::unordered_map<IoHandler*, std::shared_ptr<IoHandler>> handlers_;  // Loop thread.
  std::vector<std::shared_ptr<IoHandler>> graveyard_;                    // Loop thread.
  std::thread thread_;
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_CONTROL_EVENT_LOOP_H_
