#include "transfer/control/event_loop.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.h"
#include "common/mutex.h"

namespace sluice::internal {

Result<std::unique_ptr<EventLoop>> EventLoop::Create(std::string name) {
  UniqueFd epfd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epfd.valid()) {
    return ErrnoStatus("epoll_create1", errno, FailureScope::kTransport);
  }
  UniqueFd wakefd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wakefd.valid()) {
    return ErrnoStatus("eventfd", errno, FailureScope::kTransport);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // nullptr marks the wake fd.
  if (::epoll_ctl(epfd.get(), EPOLL_CTL_ADD, wakefd.get(), &ev) != 0) {
    return ErrnoStatus("epoll_ctl", errno, FailureScope::kTransport);
  }
  return std::unique_ptr<EventLoop>(
      new EventLoop(std::move(name), std::move(epfd), std::move(wakefd)));
}

EventLoop::EventLoop(std::string name, UniqueFd epfd, UniqueFd wakefd)
    : name_(std::move(name)), epfd_(std::move(epfd)), wakefd_(std::move(wakefd)) {
  thread_ = std::thread([this] { Run(); });
}

EventLoop::~EventLoop() {
  Stop();
}

void EventLoop::Post(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    if (!stopped_) {
      const bool was_empty = tasks_.empty();
      tasks_.push_back(std::move(task));
      if (was_empty) {
        const std::uint64_t one = 1;
        (void)!::write(wakefd_.get(), &one, sizeof(one));
      }
      return;
    }
  }
  task();
}

void EventLoop::Add(std::shared_ptr<IoHandler> h, std::uint32_t events) {
  Post([this, h = std::move(h), events]() mutable {
    epoll_event ev{};
    ev.events = events;
    ev.data.ptr = h.get();
    if (::epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, h->fd(), &ev) != 0) {
      SLUICE_LOG(error, "{}: epoll_ctl add fd {} failed: {}", name_, h->fd(), strerror(errno));
      h->OnLoopStop();
      return;
    }
    handlers_[h.get()] = std::move(h);
  });
}

void EventLoop::Modify(IoHandler* h, std::uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = h;
  ::epoll_ctl(epfd_.get(), EPOLL_CTL_MOD, h->fd(), &ev);
}

void EventLoop::Remove(IoHandler* h) {
  auto it = handlers_.find(h);
  if (it == handlers_.end()) {
    return;
  }
  ::epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, h->fd(), nullptr);
  graveyard_.push_back(std::move(it->second));
  handlers_.erase(it);
}

void EventLoop::RunTasks() {
  std::vector<std::function<void()>> tasks;
  {
    MutexLock lock(mu_);
    tasks.swap(tasks_);
  }
  for (auto& t : tasks) {
    t();
  }
}

void EventLoop::Run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  constexpr auto kTick = std::chrono::milliseconds(50);
  Clock::time_point next_tick = Clock::now() + kTick;
  epoll_event events[64];
  while (true) {
    {
      MutexLock lock(mu_);
      if (stopping_) {
        break;
      }
    }
    const auto wait_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - Clock::now()).count();
    const int n =
        ::epoll_wait(epfd_.get(), events, 64, wait_ms > 0 ? static_cast<int>(wait_ms) : 0);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        std::uint64_t v;
        (void)!::read(wakefd_.get(), &v, sizeof(v));
        continue;
      }
      static_cast<IoHandler*>(events[i].data.ptr)->OnEvents(events[i].events);
    }
    RunTasks();
    const Clock::time_point now = Clock::now();
    if (now >= next_tick) {
      next_tick = now + kTick;
      std::vector<IoHandler*> all;
      all.reserve(handlers_.size());
      for (auto& [ptr, h] : handlers_) {
        all.push_back(ptr);
      }
      for (IoHandler* h : all) {
        if (handlers_.count(h) != 0) {
          h->OnTick(now);
        }
      }
    }
    graveyard_.clear();
  }
  // Shutdown: let every handler fail its work, then drain tasks until none
  // are left (a handler's failure may post more).
  std::vector<IoHandler*> all;
  for (auto& [ptr, h] : handlers_) {
    all.push_back(ptr);
  }
  for (IoHandler* h : all) {
    h->OnLoopStop();
  }
  while (true) {
    RunTasks();
    MutexLock lock(mu_);
    if (tasks_.empty()) {
      stopped_ = true;
      break;
    }
  }
  handlers_.clear();
  graveyard_.clear();
}

void EventLoop::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    const std::uint64_t one = 1;
    (void)!::write(wakefd_.get(), &one, sizeof(one));
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

}  // namespace sluice::internal
