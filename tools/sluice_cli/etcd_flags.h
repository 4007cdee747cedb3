// --etcd URL[,URL...] and --cluster NAME, which every role takes: with
// them, roles find the store master and the orchestrator in etcd (under
// /sluice/NAME/) instead of by flags, and the master and the orchestrator
// run as a leader and standbys (the standby serves once it leads; a leader
// that loses its lease exits, for its supervisor to restart it as a
// standby).
#ifndef SLUICE_TOOLS_ETCD_FLAGS_H_
#define SLUICE_TOOLS_ETCD_FLAGS_H_

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "discovery/etcd_client.h"
#include "discovery/membership.h"

namespace sluice::cli {

struct EtcdOptions {
  std::string endpoints;  // Empty: no etcd.
  std::string cluster = "default";
  int lease_ttl_s = 3;
  // TLS to etcd (https:// endpoints) and etcd's auth.
  std::string ca_file, cert_file, key_file, user, password_file;
};

// Declares --etcd, --cluster, --etcd-lease-ttl-s, --etcd-ca, --etcd-cert,
// --etcd-key, --etcd-user and --etcd-password-file on `cmd`.
void AddEtcdFlags(CLI::App* cmd, EtcdOptions* o);

// The password in the file at `path` (its owner's only; trimmed; 1..4096
// bytes). Errors: kInvalidArgument naming `flag` and the file.
Result<std::string> ReadEtcdPassword(const std::string& flag, const std::string& path);

// The TLS files and credentials of `o` for discovery::EtcdClient: the
// password read from its file (its owner's only; trimmed). Errors:
// kInvalidArgument naming the flag or file.
Result<discovery::EtcdSecurity> EtcdSecurityOf(const EtcdOptions& o);

// The client for `o` (null when --etcd is not given); on an error prints it
// prefixed by `role` and sets *failed.
std::unique_ptr<discovery::EtcdClient> ConnectEtcd(const char* role, const EtcdOptions& o,
                                                   bool* failed);

// What a role learns of the leading master or orchestrator: its key.
std::string LeaderKey(const EtcdOptions& o, const std::string& role);

// Fills `*endpoint` (when empty) with what the leader of `role` published
// (`field` of its space-separated value), waiting up to `timeout`; prints
// the error prefixed by `who` and returns false when it cannot.
bool ResolveLeader(const char* who, discovery::EtcdClient* etcd, const EtcdOptions& o,
                   const std::string& role, int field, std::string* endpoint,
                   std::chrono::milliseconds timeout = std::chrono::seconds(60));

// Where the leader of `role` is now (`field` of its value; empty when
// etcd cannot say within 500 ms), for clients that follow a new leader
// (StageWorkerConfig::resolve_orchestrator, StoreClientConfig::
// resolve_master). Keeps `etcd` alive; thread-safe.
std::function<std::string()> LeaderResolver(std::shared_ptr<discovery::EtcdClient> etcd,
                                            const EtcdOptions& o, const std::string& role,
                                            int field);

// Blocks until this process leads `role` with `value`, or a stop signal
// arrives (null then). Leadership lost later exits the process (code 3).
std::unique_ptr<discovery::Election> LeadOrStandBy(const char* who, discovery::EtcdClient* etcd,
                                                   const EtcdOptions& o, const std::string& role,
                                                   const std::string& value);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_ETCD_FLAGS_H_
