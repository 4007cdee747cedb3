#include "tools/sluice_cli/signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

namespace sluice::cli {

void BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForStopSignal(bool exit_on_eof) {
  if (exit_on_eof) {
    std::thread([] {
      char c;
      while (::read(0, &c, 1) > 0) {
      }
      ::kill(::getpid(), SIGTERM);
    }).detach();
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace sluice::cli
