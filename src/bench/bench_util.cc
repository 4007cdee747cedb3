#include "bench/bench_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/random.h"
#include "device/backends.h"

extern char** environ;

namespace sluice::bench {

Result<std::unique_ptr<BenchChild>> BenchChild::Spawn(std::vector<std::string> args) {
  std::unique_ptr<BenchChild> child(new BenchChild());
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
    return InternalError("pipe failed");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  const int rc = posix_spawn(&child->pid_, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  child->in_fd_ = in[1];
  child->out_fd_ = out[0];
  if (rc != 0) {
    child->pid_ = -1;
    return UnavailableError("cannot start " + args[0] + ": " + strerror(rc),
                            FailureScope::kTransport);
  }
  // Lines before the banner (a role's summary) are skipped.
  std::string line;
  char c;
  pollfd p{child->out_fd_, POLLIN, 0};
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (line.rfind("READY ", 0) != 0 && std::chrono::steady_clock::now() < until) {
    line.clear();
    while (::poll(&p, 1, 30000) == 1 && ::read(child->out_fd_, &c, 1) == 1 && c != '\n') {
      line.push_back(c);
    }
    if (p.revents & (POLLHUP | POLLERR)) {
      break;
    }
  }
  if (line.rfind("READY ", 0) != 0) {
    return UnavailableError(
        "helper process '" + args[1] + " " + args[2] + "' did not start (see its log above)",
        FailureScope::kTransport);
  }
  child->banner_ = line.substr(6);
  return child;
}

std::string BenchChild::Word(int i) const {
  std::istringstream is(banner_);
  std::string w;
  for (int k = 0; k <= i; ++k) {
    is >> w;
  }
  return w;
}

BenchChild::~BenchChild() {
  ::close(in_fd_);
  ::close(out_fd_);
  if (pid_ <= 0) {
    return;
  }
  auto exited = [this](int tries) {
    for (int i = 0; i < tries; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  if (exited(10)) {
    return;
  }
  ::kill(pid_, SIGTERM);
  if (!exited(100)) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

WarmMemory::WarmMemory(std::size_t n) : size(n) {
  void* p =
      ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  data = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  if (data != nullptr) {
    std::memset(data, 0x5a, n);
  }
}

WarmMemory::~WarmMemory() {
  if (data != nullptr) {
    ::munmap(data, size);
  }
}

DeviceMemory::DeviceMemory(const std::string& device, std::size_t size) {
  if (size == 0) {
    return;
  }
  auto b = device::ProcessBackend(device);
  if (!b.ok()) {
    error = b.status();
    return;
  }
  backend = *b;
  auto p = backend->Allocate(0, size);
  if (!p.ok()) {
    error = p.status();
    return;
  }
  data = static_cast<char*>(*p);
}

DeviceMemory::~DeviceMemory() {
  if (data != nullptr) {
    (void)backend->Free(data);
  }
}

Status DeviceMemory::CopyIn(const void* host, std::size_t len) {
  SLUICE_RETURN_IF_ERROR(error);
  SLUICE_ASSIGN_OR_RETURN(device::Stream stream, backend->CreateStream(0));
  SLUICE_ASSIGN_OR_RETURN(device::Event event, backend->CreateEvent());
  Status s = backend->CopyAsync(data, host, len, stream);
  if (s.ok()) {
    s = backend->Record(event, stream);
  }
  if (s.ok()) {
    s = backend->Wait(event, std::chrono::seconds(60));
  }
  (void)backend->DestroyEvent(event);
  (void)backend->DestroyStream(stream);
  return s;
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) {
    return 0;
  }
  const std::size_t k = std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

TokenFile::~TokenFile() {
  if (!path.empty()) {
    std::remove(path.c_str());
  }
}

Result<std::string> WriteTokenFile(TokenFile* t) {
  char tmpl[] = "/tmp/sluice-bench-token-XXXXXX";
  const int fd = ::mkstemp(tmpl);  // Mode 0600.
  if (fd < 0) {
    return InternalError("cannot create a token file in /tmp");
  }
  t->path = tmpl;
  const std::string token = internal::RandomId() + internal::RandomId();
  const bool ok = ::write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  ::close(fd);
  if (!ok) {
    return InternalError("cannot write the token file " + t->path);
  }
  return t->path;
}

Status ValidateTargetHost(const std::string& netns, const std::string& address,
                          const std::string& transport) {
  in_addr a{};
  if (::inet_pton(AF_INET, address.c_str(), &a) != 1) {
    return InvalidArgumentError("--target-address '" + address + "' is not an IPv4 address");
  }
  if (!netns.empty() &&
      ((transport != "tcp" && transport != "ucx") || netns.size() > 64 ||
       netns.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789._-") != std::string::npos)) {
    return InvalidArgumentError(
        "--target-netns names a network namespace ([A-Za-z0-9._-], at most 64) and needs "
        "--transport tcp or ucx");
  }
  return Status::Ok();
}

std::vector<std::string> OnTargetHost(const std::string& netns, std::vector<std::string> args) {
  if (!netns.empty()) {
    args.insert(args.begin(), {"/usr/sbin/ip", "netns", "exec", netns});
  }
  return args;
}

}  // namespace sluice::bench
