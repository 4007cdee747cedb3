// Test hosts made of Linux network namespaces on one machine: each host is
// a namespace with its own address (10.N.0.k/24, eth0 of a veth pair whose
// other end sits on a bridge in the test's namespace, where the test itself
// is 10.N.0.254) and its own host id (SLUICE_HOST_ID), so roles started in
// it (`ip netns exec`) see each other as one host and other hosts as
// remote: tcp between hosts, shared memory within one. A host's link can be
// taken down and up, shaped with tc, and given latency and loss (Impair).
// Needs root and iproute2; a test
// calls Available() and skips without them. Everything is removed when the
// object goes away.
#ifndef SLUICE_TESTS_INTEGRATION_NETNS_HOSTS_H_
#define SLUICE_TESTS_INTEGRATION_NETNS_HOSTS_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "child_process.h"

namespace sluice::testing {

class NetnsHosts {
 public:
  // Makes `n` hosts (1..8). ok() says whether every step worked.
  explicit NetnsHosts(int n) : tag_(std::to_string(::getpid() % 100000)) {
    subnet_ = "10." + std::to_string(100 + ::getpid() % 100) + ".0.";
    bridge_ = "slb" + tag_;
    ok_ = Sh("ip link add " + bridge_ + " type bridge") &&
          Sh("ip addr add " + subnet_ + "254/24 dev " + bridge_) &&
          Sh("ip link set " + bridge_ + " up");
    for (int i = 0; ok_ && i < n; ++i) {
      const std::string ns = Ns(i), veth = Veth(i);
      Sh("ip link del " + veth + " 2>/dev/null || true");  // One an earlier run left behind.
      ok_ = Sh("ip netns add " + ns) &&
            Sh("ip link add " + veth + " type veth peer name eth0 netns " + ns) &&
            Sh("ip link set " + veth + " master " + bridge_ + " up") &&
            Sh(Exec(i) + "ip addr add " + address(i) + "/24 dev eth0") &&
            Sh(Exec(i) + "ip link set eth0 up") && Sh(Exec(i) + "ip link set lo up");
      hosts_ = i + 1;
    }
  }
  ~NetnsHosts() {
    processes_.clear();  // Before their namespaces go.
    for (int i = 0; i < hosts_; ++i) {
      // The veth pair goes now: a namespace's own interfaces go only once
      // its last process is reaped, and the next hosts of this process
      // reuse the names.
      Sh("ip link del " + Veth(i) + " 2>/dev/null");
      Sh("ip netns del " + Ns(i) + " 2>/dev/null");
    }
    Sh("ip link del " + bridge_ + " 2>/dev/null");
  }
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  // Whether this machine can make hosts (root, iproute2, netns support).
  static bool Available() {
    return ::geteuid() == 0 && ::access("/usr/sbin/ip", X_OK) == 0 &&
           std::system("ip netns list >/dev/null 2>&1") == 0;
  }
  bool ok() const { return ok_; }
  // Host i's address, e.g. "10.123.0.2"; the test's own is gateway().
  std::string address(int i) const { return subnet_ + std::to_string(i + 1); }
  std::string gateway() const { return subnet_ + "254"; }
  std::string host_id(int i) const { return "host-" + std::string(1, static_cast<char>('a' + i)); }

  // Starts `argv` in host i (with its host id), its stderr to `log`; the
  // process lives until the object goes away or Kill(). Returns it.
  ChildProcess& Start(int i, std::vector<std::string> argv, const std::string& log,
                      int banner_ms = 30000) {
    std::vector<std::string> full = {
        "/usr/sbin/ip", "netns", "exec", Ns(i), "/usr/bin/env", "SLUICE_HOST_ID=" + host_id(i)};
    full.insert(full.end(), argv.begin(), argv.end());
    processes_.push_back(std::make_unique<ChildProcess>(full, banner_ms, log));
    return *processes_.back();
  }

  // Host i's link to the bridge down (it is cut off) or up again.
  bool SetLink(int i, bool up) { return Sh("ip link set " + Veth(i) + (up ? " up" : " down")); }
  // Replaces host i's egress qdisc with `qdisc` (tc syntax after "root"),
  // e.g. "tbf rate 10gbit burst 1mb latency 10ms"; false if tc refuses it
  // (a kernel without netem, say).
  bool Shape(int i, const std::string& qdisc) {
    return Sh(Exec(i) + "tc qdisc replace dev eth0 root " + qdisc + " 2>/dev/null");
  }
  // Likewise for what reaches host i (its link's bridge end).
  bool ShapeInbound(int i, const std::string& qdisc) {
    return Sh("tc qdisc replace dev " + Veth(i) + " root " + qdisc + " 2>/dev/null");
  }
  // Holds each packet host i sends for `delay_us` and drops
  // `loss_permille` of them (seeded), on top of any tc shaping: iptables
  // queues the host's outgoing packets (NFQUEUE, queue i) to `impair_bin`
  // (tests/integration/link_impair.cc) running in the host. Used in place
  // of tc netem, which this project's CI kernel lacks and which would
  // replace a tbf root qdisc rather than add to it. False if a step failed.
  bool Impair(int i, const std::string& impair_bin, int delay_us, int loss_permille) {
    ChildProcess& tool =
        Start(i,
              {impair_bin, "--queue", std::to_string(i), "--delay-us", std::to_string(delay_us),
               "--loss-permille", std::to_string(loss_permille), "--seed", "7"},
              "/dev/null", 5000);
    if (tool.Word(1) != "ready") {
      return false;
    }
    impairs_.push_back({i, &tool});
    return Sh(Exec(i) + "iptables -A OUTPUT -o eth0 -j NFQUEUE --queue-num " + std::to_string(i) +
              " --queue-bypass");
  }
  // Ends host i's impairment: the rule goes, then the process lets go of
  // what it holds. The packets it passed and dropped; {-1, -1} if it was
  // not impaired or did not say.
  std::pair<long, long> EndImpair(int i) {
    for (auto it = impairs_.begin(); it != impairs_.end(); ++it) {
      if (it->first != i) {
        continue;
      }
      ChildProcess* tool = it->second;
      impairs_.erase(it);
      Sh(Exec(i) + "iptables -F OUTPUT");
      tool->Signal(SIGTERM);
      long passed = -1, dropped = -1;
      const std::string line = tool->NextLine(5000);
      if (std::sscanf(line.c_str(), "link_impair passed %ld dropped %ld", &passed, &dropped) != 2) {
        std::fprintf(stderr, "netns: link_impair said '%s'\n", line.c_str());
      }
      tool->Wait(5000);
      return {passed, dropped};
    }
    return {-1, -1};
  }
  // Runs `cmd` in host i; true when it exits 0.
  bool Run(int i, const std::string& cmd) { return Sh(Exec(i) + cmd); }
  // Host i's network namespace (for `ip netns exec`).
  std::string Ns(int i) const { return "sl" + tag_ + "-" + std::to_string(i); }

 private:
  std::string Veth(int i) const { return "slv" + tag_ + "h" + std::to_string(i); }
  std::string Exec(int i) const { return "ip netns exec " + Ns(i) + " "; }
  static bool Sh(const std::string& cmd) {
    const int rc = std::system(cmd.c_str());
    if (rc != 0) {
      std::fprintf(stderr, "netns: '%s' failed (%d)\n", cmd.c_str(), rc);
    }
    return rc == 0;
  }

  std::string tag_, subnet_, bridge_;
  int hosts_ = 0;
  bool ok_ = false;
  std::vector<std::unique_ptr<ChildProcess>> processes_;
  std::vector<std::pair<int, ChildProcess*>> impairs_;  // Into processes_.
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_INTEGRATION_NETNS_HOSTS_H_
