// A real etcd for tests (Debian's etcd-server): started on free loopback
// ports with its data in a temporary directory, killed and restarted at
// will, removed at the end. Tests skip when /usr/bin/etcd is absent.
#ifndef SLUICE_DISCOVERY_TESTING_ETCD_SERVER_H_
#define SLUICE_DISCOVERY_TESTING_ETCD_SERVER_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/testing/free_port.h"
#include "discovery/etcd_client.h"

namespace sluice::discovery::testing {

class EtcdServer {
 public:
  static bool Available() { return ::access("/usr/bin/etcd", X_OK) == 0; }

  EtcdServer() {
    char tmpl[] = "/tmp/sluice-etcd-XXXXXX";
    dir_ = ::mkdtemp(tmpl) != nullptr ? tmpl : "";
    client_port_ = internal::FreeLoopbackPort();
    peer_port_ = internal::FreeLoopbackPort();
    Start();
  }
  ~EtcdServer() {
    Kill();
    if (!dir_.empty()) {
      (void)!std::system(("rm -rf " + dir_).c_str());
    }
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(client_port_); }
  // Starts it (on the same ports and data) and waits until it answers;
  // false if it did not within 20 s.
  bool Start() {
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
      const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
      const std::string log = dir_ + "/etcd.log";
      (void)!std::freopen(log.c_str(), "a", stderr);
      (void)!std::freopen(log.c_str(), "a", stdout);
      ::execl("/usr/bin/etcd", "etcd", "--data-dir", (dir_ + "/data").c_str(),
              "--listen-client-urls", client.c_str(), "--advertise-client-urls", client.c_str(),
              "--listen-peer-urls", peer.c_str(), "--initial-advertise-peer-urls", peer.c_str(),
              "--initial-cluster", ("default=" + peer).c_str(), nullptr);
      ::_exit(127);
    }
    auto c = EtcdClient::Create({url()}, std::chrono::milliseconds(500));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if ((*c)->Get("/ready").ok()) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // SIGKILL, reaped.
  void Kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  std::string dir_;
  int client_port_ = 0, peer_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace sluice::discovery::testing

#endif  // SLUICE_DISCOVERY_TESTING_ETCD_SERVER_H_
