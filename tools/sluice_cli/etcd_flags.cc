#include "sluice_cli/etcd_flags.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "sluice/security.h"

#include "sluice_cli/signals.h"

namespace sluice::cli {

void AddEtcdFlags(CLI::App* cmd, EtcdOptions* o) {
  cmd->add_option("--etcd", o->endpoints,
                  "etcd endpoints, http[s]://HOST:PORT[,...]: find the master and the orchestrator "
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
  cmd->add_option("--etcd-ca", o->ca_file,
                  "with https:// etcd endpoints: the CA that signed etcd's certificates")
      ->envname("SLUICE_ETCD_CA_FILE");
  cmd->add_option("--etcd-cert", o->cert_file,
                  "this role's client certificate for an etcd that requires one "
                  "(--client-cert-auth)")
      ->envname("SLUICE_ETCD_CERT_FILE");
  cmd->add_option("--etcd-key", o->key_file, "the client certificate's key (owner-only file)")
      ->envname("SLUICE_ETCD_KEY_FILE");
  cmd->add_option("--etcd-user", o->user, "etcd's auth: the user this role authenticates as")
      ->envname("SLUICE_ETCD_USER");
  cmd->add_option("--etcd-password-file", o->password_file,
                  "etcd's auth: a file holding the user's password (owner-only)")
      ->envname("SLUICE_ETCD_PASSWORD_FILE");
}

Result<std::string> ReadEtcdPassword(const std::string& flag, const std::string& path) {
  SLUICE_RETURN_IF_ERROR(CheckSecretFile(flag, path));
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    return InvalidArgumentError(flag + " " + path + ": cannot read it");
  }
  const std::size_t end = text.find_last_not_of(" \t\r\n");
  std::string password = end == std::string::npos ? "" : text.substr(0, end + 1);
  if (password.empty() || password.size() > 4096) {
    return InvalidArgumentError(flag + " " + path + ": the password must be 1..4096 bytes");
  }
  return password;
}

Result<discovery::EtcdSecurity> EtcdSecurityOf(const EtcdOptions& o) {
  discovery::EtcdSecurity s{o.ca_file, o.cert_file, o.key_file, o.user, ""};
  if (!o.password_file.empty()) {
    SLUICE_ASSIGN_OR_RETURN(s.password, ReadEtcdPassword("--etcd-password-file", o.password_file));
  }
  return s;
}

std::unique_ptr<discovery::EtcdClient> ConnectEtcd(const char* role, const EtcdOptions& o,
                                                   bool* failed) {
  *failed = false;
  if (o.endpoints.empty()) {
    return nullptr;
  }
  Result<std::vector<std::string>> urls = discovery::ParseEtcdEndpoints(o.endpoints);
  Result<discovery::EtcdSecurity> security = EtcdSecurityOf(o);
  Result<std::unique_ptr<discovery::EtcdClient>> c =
      !urls.ok()       ? urls.status()
      : !security.ok() ? security.status()
                       : discovery::EtcdClient::Create(*urls, std::chrono::seconds(2), *security);
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
  return discovery::LeaderKey(o.cluster, role);
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
