#include "tools/sluice_cli/etcd_flags.h"

#include <cstdlib>
#include <iostream>
#include <sstream>

#include "tools/sluice_cli/signals.h"

namespace sluice::cli {

void AddEtcdFlags(CLI::App* cmd, EtcdOptions* o) {
  cmd->add_option("--etcd", o->endpoints,
                  "etcd endpoints, http://HOST:PORT[,...]: find the master and the orchestrator "
                  "there, and run the master and the orchestrator as leader and standbys")
      ->envname("SLUICE_ETCD");
  cmd->add_option("--cluster", o->cluster, "the cluster's name in etcd (keys /sluice/NAME/...)")
      ->check([](const std::string& s) {
        return !s.empty() && s.size() <= 64 &&
                       s.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_.") ==
                           std::string::npos
                   ? std::string()
                   : std::string("1-64 of [a-z0-9-_.]");
      })
      ->capture_default_str();
  cmd->add_option("--etcd-lease-ttl-s", o->lease_ttl_s,
                  "a leader dead this long is replaced by a standby")
      ->check(CLI::Range(1, 600))
      ->capture_default_str();
}

std::unique_ptr<discovery::EtcdClient> ConnectEtcd(const char* role, const EtcdOptions& o,
                                                   bool* failed) {
  *failed = false;
  if (o.endpoints.empty()) {
    return nullptr;
  }
  Result<std::vector<std::string>> urls = discovery::ParseEtcdEndpoints(o.endpoints);
  Result<std::unique_ptr<discovery::EtcdClient>> c =
      urls.ok() ? discovery::EtcdClient::Create(*urls, std::chrono::seconds(2)) : urls.status();
  if (!c.ok()) {
    std::cerr << role << ": --etcd: " << c.status().message() << "\n";
    *failed = true;
    return nullptr;
  }
  return std::move(*c);
}

namespace {

// Word `field` of a leader's space-separated value ("grpc http"); empty
// when it has fewer.
std::string Field(const std::string& value, int field) {
  std::istringstream in(value);
  std::string word;
  for (int i = 0; i <= field; ++i) {
    if (!(in >> word)) {
      return "";
    }
  }
  return word;
}

}  // namespace

std::string LeaderKey(const EtcdOptions& o, const std::string& role) {
  return discovery::RoleKey(o.cluster, role) + "/leader";
}

bool ResolveLeader(const char* who, discovery::EtcdClient* etcd, const EtcdOptions& o,
                   const std::string& role, int field, std::string* endpoint,
                   std::chrono::milliseconds timeout) {
  if (etcd == nullptr || !endpoint->empty()) {
    return true;
  }
  Result<std::string> v = discovery::Resolve(etcd, LeaderKey(o, role), timeout);
  if (!v.ok()) {
    std::cerr << who << ": the " << role << " in etcd: " << v.status().ToString() << "\n";
    return false;
  }
  *endpoint = Field(*v, field);
  if (endpoint->empty()) {
    std::cerr << who << ": the " << role << " in etcd published '" << *v << "', not an endpoint\n";
    return false;
  }
  return true;
}

std::function<std::string()> LeaderResolver(std::shared_ptr<discovery::EtcdClient> etcd,
                                            const EtcdOptions& o, const std::string& role,
                                            int field) {
  return [etcd = std::move(etcd), key = LeaderKey(o, role), field] {
    Result<std::string> v = discovery::Resolve(etcd.get(), key, std::chrono::milliseconds(500));
    return v.ok() ? Field(*v, field) : std::string();
  };
}

std::unique_ptr<discovery::Election> LeadOrStandBy(const char* who, discovery::EtcdClient* etcd,
                                                   const EtcdOptions& o, const std::string& role,
                                                   const std::string& value) {
  Result<std::unique_ptr<discovery::Election>> e = discovery::Election::Campaign(
      etcd, LeaderKey(o, role), value, std::chrono::seconds(o.lease_ttl_s),
      std::chrono::milliseconds(200), [] { return StopSignalPending(); });
  if (!e.ok()) {
    return nullptr;  // Stopped while standing by.
  }
  (*e)->OnLost([who] {
    // Another may lead now: acting on would split the cluster. The
    // supervisor restarts this process, which stands by.
    std::cerr << who << ": lost the lead in etcd; exiting\n";
    std::_Exit(3);
  });
  return std::move(*e);
}

}  // namespace sluice::cli
