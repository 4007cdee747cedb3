// A child process for multi-process tests: started with posix_spawn, its
// first stdout line read as a readiness banner, killed and reaped when the
// object goes away.
#ifndef SLUICE_TESTS_INTEGRATION_CHILD_PROCESS_H_
#define SLUICE_TESTS_INTEGRATION_CHILD_PROCESS_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace sluice::testing {

class ChildProcess {
 public:
  // Starts `argv` and waits (up to `banner_ms`) for its first stdout line.
  // Its stderr goes to `stderr_path` when given (else it is the test's).
  explicit ChildProcess(std::vector<std::string> argv, int banner_ms = 20000,
                        const std::string& stderr_path = "") {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
      return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    if (!stderr_path.empty()) {
      posix_spawn_file_actions_addopen(&fa, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                       0644);
    }
    std::vector<char*> args;
    for (std::string& a : argv) {
      args.push_back(a.data());
    }
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ) != 0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
    char c;
    pollfd p{stdout_, POLLIN, 0};
    while (::poll(&p, 1, banner_ms) == 1 && ::read(stdout_, &c, 1) == 1 && c != '\n') {
      banner_.push_back(c);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    ::close(stdin_);
    ::close(stdout_);
    Kill();
  }

  const std::string& banner() const { return banner_; }
  // A process that printed nothing yet (a standby): waits up to
  // `timeout_ms` more for its first line; whether one came.
  bool AwaitBanner(int timeout_ms) {
    char c;
    pollfd p{stdout_, POLLIN, 0};
    while (::poll(&p, 1, timeout_ms) == 1 && ::read(stdout_, &c, 1) == 1 && c != '\n') {
      banner_.push_back(c);
    }
    return !banner_.empty();
  }
  // The next line of its stdout after the banner, waiting up to
  // `timeout_ms`; empty if none came.
  std::string NextLine(int timeout_ms) {
    std::string line;
    char c;
    pollfd p{stdout_, POLLIN, 0};
    while (::poll(&p, 1, timeout_ms) == 1 && ::read(stdout_, &c, 1) == 1 && c != '\n') {
      line.push_back(c);
    }
    return line;
  }
  // The process id while it runs (not yet reaped); -1 after.
  pid_t pid() const { return pid_; }
  // Word `i` of the banner (0-based).
  std::string Word(int i) const {
    std::istringstream is(banner_);
    std::string w;
    for (int k = 0; k <= i; ++k) {
      is >> w;
    }
    return w;
  }
  void Signal(int sig) {
    if (pid_ > 0) {
      ::kill(pid_, sig);
    }
  }
  // Waits up to `timeout_ms` for the process to exit; its wait status, or
  // -1 if it still runs.
  int Wait(int timeout_ms) {
    for (int waited = 0; pid_ > 0 && waited <= timeout_ms; waited += 10) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      ::usleep(10000);
    }
    return -1;
  }
  void Kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
  std::string banner_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_INTEGRATION_CHILD_PROCESS_H_
