// etcd's auth for a sluice cluster: a user per sluice role, each whose
// etcd role may touch only the keys that sluice role uses, so a worker's
// etcd password cannot rewrite the orchestrator's leader key (and steer
// workers to a fake orchestrator) nor read the job journal.
#ifndef SLUICE_DISCOVERY_ETCD_AUTH_H_
#define SLUICE_DISCOVERY_ETCD_AUTH_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

#include "discovery/etcd_client.h"

namespace sluice::discovery {

// The sluice roles with etcd users.
inline constexpr const char* kEtcdRoles[] = {"master", "orchestrator", "node", "worker"};

// What one etcd role may do: `key` alone, or every key starting with it.
struct EtcdGrant {
  std::string key;
  bool prefix = false;
  bool write = false;  // Read and write; else read only.
};

// The keys sluice `role` ("master", ...) of `cluster` uses: a leader's
// role all of its own keys (its leader key, its journal), the others read
// the leader keys they resolve. Empty for an unknown role.
std::vector<EtcdGrant> EtcdGrantsOf(const std::string& cluster, std::string_view role);

// The etcd user (and etcd role) name of sluice `role` in `cluster`:
// "sluice-<cluster>-<role>".
std::string EtcdUserOf(const std::string& cluster, std::string_view role);

// Turns etcd's auth on for `cluster`: the user "root" (etcd's
// administrator, `root_password`), and for each sluice role in
// `passwords` (kEtcdRoles) its user with that password and an etcd role
// holding EtcdGrantsOf. `etcd` authenticates as root once auth is on (a
// second run: passwords set again, grants added, nothing removed), or not
// at all before. Errors: etcd's, naming the call; kInvalidArgument for a
// role not in kEtcdRoles or an empty password.
Status SetUpEtcdAuth(EtcdClient* etcd, const std::string& cluster, const std::string& root_password,
                     const std::map<std::string, std::string>& passwords);

}  // namespace sluice::discovery

#endif  // SLUICE_DISCOVERY_ETCD_AUTH_H_
