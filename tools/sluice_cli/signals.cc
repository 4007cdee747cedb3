#include "sluice_cli/signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <mutex>
#include <thread>

namespace sluice::cli {

void BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void StopOnStdinEof() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::thread([] {
      char c;
      while (::read(0, &c, 1) > 0) {
      }
      ::kill(::getpid(), SIGTERM);
    }).detach();
  });
}

bool StopSignalPending() {
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  return sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1;
}

int WaitForStopSignal(bool exit_on_eof) {
  if (exit_on_eof) {
    StopOnStdinEof();
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};

void OnStopSignal(int sig) {
  g_stop_signal.store(sig);
  g_stop.store(true);
}

}  // namespace

const std::atomic<bool>* StopFlagOnSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return &g_stop;
}

int StopSignal() {
  return g_stop_signal.load();
}

}  // namespace sluice::cli
