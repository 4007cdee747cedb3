// A real etcd for tests (Debian's etcd-server): started on free loopback
// ports with its data in a temporary directory, killed and restarted at
// will, removed at the end; optionally serving TLS that requires client
// certificates, and with a short auth-token lifetime. Tests skip when
// /usr/bin/etcd is absent.
#ifndef SLUICE_DISCOVERY_TESTING_ETCD_SERVER_H_
#define SLUICE_DISCOVERY_TESTING_ETCD_SERVER_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/free_port.h"
#include "discovery/etcd_client.h"

namespace sluice::discovery::testing {

// TLS for the client port: etcd serves `cert`/`key` and requires client
// certificates signed by `ca` (which clients get in EtcdSecurity::ca_file).
struct EtcdServerTls {
  std::string ca, cert, key;
};

class EtcdServer {
 public:
  static bool Available() { return ::access("/usr/bin/etcd", X_OK) == 0; }

  // `client` is how the server's own readiness check dials it (with TLS:
  // a certificate the CA signed). `auth_token_ttl_s` > 0: auth tokens
  // expire after that long (etcd's default is 300 s).
  explicit EtcdServer(EtcdServerTls tls = {}, EtcdSecurity client = {}, int auth_token_ttl_s = 0)
      : tls_(std::move(tls)), client_(std::move(client)), auth_token_ttl_s_(auth_token_ttl_s) {
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

  std::string url() const {
    return (tls_.cert.empty() ? "http://" : "https://") + std::string("127.0.0.1:") +
           std::to_string(client_port_);
  }
  // Starts it (on the same ports and data) and waits until it answers;
  // false if it did not within 20 s.
  bool Start() {
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string client = url();
      const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
      const std::string log = dir_ + "/etcd.log";
      const std::string data = dir_ + "/data";
      const std::string ttl = std::to_string(auth_token_ttl_s_);
      const std::string initial = "default=" + peer;
      (void)!std::freopen(log.c_str(), "a", stderr);
      (void)!std::freopen(log.c_str(), "a", stdout);
      std::vector<const char*> argv = {"etcd",         "--data-dir",
                                       data.c_str(),   "--listen-client-urls",
                                       client.c_str(), "--advertise-client-urls",
                                       client.c_str(), "--listen-peer-urls",
                                       peer.c_str(),   "--initial-advertise-peer-urls",
                                       peer.c_str(),   "--initial-cluster",
                                       initial.c_str()};
      if (!tls_.cert.empty()) {
        for (const char* a : {"--cert-file", tls_.cert.c_str(), "--key-file", tls_.key.c_str(),
                              "--trusted-ca-file", tls_.ca.c_str(), "--client-cert-auth"}) {
          argv.push_back(a);
        }
      }
      if (auth_token_ttl_s_ > 0) {
        argv.push_back("--auth-token-ttl");
        argv.push_back(ttl.c_str());
      }
      argv.push_back(nullptr);
      ::execv("/usr/bin/etcd", const_cast<char* const*>(argv.data()));
      ::_exit(127);
    }
    auto c = EtcdClient::Create({url()}, std::chrono::milliseconds(500), client_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if ((*c)->Get("/ready").ok()) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // SIGSTOP / SIGCONT: an etcd that holds its connections and answers
  // nothing (each call waits out the client's timeout), then answers again.
  void Pause() {
    if (pid_ > 0) {
      ::kill(pid_, SIGSTOP);
    }
  }
  void Resume() {
    if (pid_ > 0) {
      ::kill(pid_, SIGCONT);
    }
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
  EtcdServerTls tls_;
  EtcdSecurity client_;
  int auth_token_ttl_s_ = 0;
  std::string dir_;
  int client_port_ = 0, peer_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace sluice::discovery::testing

#endif  // SLUICE_DISCOVERY_TESTING_ETCD_SERVER_H_
