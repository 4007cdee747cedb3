// `sluice etcd-auth --etcd URL --cluster NAME --passwords DIR`: turns etcd's
// auth on for a cluster, with a user per role that may touch only that
// role's keys (discovery/etcd_auth.h). DIR holds one password file per
// user: root, master, orchestrator, node, worker (each its owner's only).
// Run it once when etcd is new, and again (it then signs in as root) to
// set the passwords anew.
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "discovery/etcd_auth.h"
#include "sluice_cli/commands.h"
#include "sluice_cli/etcd_flags.h"

namespace sluice::cli {
namespace {

struct EtcdAuthFlags {
  EtcdOptions etcd;
  std::string passwords;
};

int RunEtcdAuth(const EtcdAuthFlags& f) {
  const auto fail = [](const std::string& what) {
    std::cerr << "sluice etcd-auth: " << what << "\n";
    return 2;
  };
  Result<std::string> root = ReadEtcdPassword("--passwords", f.passwords + "/root");
  if (!root.ok()) {
    return fail(std::string(root.status().message()));
  }
  std::map<std::string, std::string> passwords;
  for (const char* role : discovery::kEtcdRoles) {
    Result<std::string> pw = ReadEtcdPassword("--passwords", f.passwords + "/" + role);
    if (!pw.ok()) {
      return fail(std::string(pw.status().message()));
    }
    passwords[role] = *pw;
  }
  // As root when auth is on already; before, etcd takes no user at all.
  Result<std::vector<std::string>> urls = discovery::ParseEtcdEndpoints(f.etcd.endpoints);
  Result<discovery::EtcdSecurity> security = EtcdSecurityOf(f.etcd);
  if (!urls.ok() || !security.ok()) {
    return fail("--etcd: " +
                std::string((!urls.ok() ? urls.status() : security.status()).message()));
  }
  discovery::EtcdSecurity root_security = *security;
  root_security.user = "root";
  root_security.password = *root;
  Status s;
  for (const discovery::EtcdSecurity& sec : {root_security, *security}) {
    Result<std::unique_ptr<discovery::EtcdClient>> c =
        discovery::EtcdClient::Create(*urls, std::chrono::seconds(5), sec);
    s = c.ok() ? discovery::SetUpEtcdAuth(c->get(), f.etcd.cluster, *root, passwords) : c.status();
    if (!(s.code() == StatusCode::kUnauthenticated &&
          s.message().find("not enabled") != std::string_view::npos)) {
      break;  // Done, or failed for another reason than auth being off.
    }
  }
  if (!s.ok()) {
    std::cerr << "sluice etcd-auth: " << s.ToString() << "\n";
    return 1;
  }
  std::cout << "etcd auth on for cluster " << f.etcd.cluster << ": each role takes --etcd-user "
            << discovery::EtcdUserOf(f.etcd.cluster, "ROLE")
            << " --etcd-password-file with its file in " << f.passwords
            << " (ROLE: master, orchestrator, node for store nodes, worker)\n";
  return 0;
}

}  // namespace

void AddEtcdAuthCommand(CLI::App& app, std::vector<Command>* out) {
  CLI::App* cmd = app.add_subcommand(
      "etcd-auth",
      "turn etcd's auth on for a cluster: a user per role (sluice-CLUSTER-ROLE) that may touch "
      "only that role's keys; again to set new passwords");
  auto f = std::make_shared<EtcdAuthFlags>();
  cmd->add_option("--etcd", f->etcd.endpoints, "etcd endpoints, http[s]://HOST:PORT[,...]")
      ->required();
  cmd->add_option("--cluster", f->etcd.cluster, "the cluster's name in etcd")
      ->capture_default_str();
  cmd->add_option("--etcd-ca", f->etcd.ca_file, "the CA that signed etcd's certificates");
  cmd->add_option("--etcd-cert", f->etcd.cert_file,
                  "a client certificate for an etcd that requires one (without a common name: "
                  "etcd's gateway refuses one with auth on)");
  cmd->add_option("--etcd-key", f->etcd.key_file, "the client certificate's key");
  cmd->add_option("--passwords", f->passwords,
                  "a directory of password files, each its owner's only: root, master, "
                  "orchestrator, node, worker")
      ->required();
  out->push_back({cmd, [f] { return RunEtcdAuth(*f); }});
}

}  // namespace sluice::cli
