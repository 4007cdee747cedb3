#include "sluice_cli/security_flags.h"

#include <iostream>
#include <memory>

namespace sluice::cli {

SecurityResolver AddSecurityFlags(CLI::App* cmd) {
  struct Flags {
    SecurityFiles files;
    std::string server_name;
    bool insecure = false;
    bool encrypt_data = false;
  };
  auto f = std::make_shared<Flags>();
  cmd->add_option("--cluster-token", f->files.token_file,
                  "file holding the cluster's shared secret, the same on every host "
                  "(default: $SLUICE_CLUSTER_TOKEN_FILE; none: an open cluster)");
  cmd->add_option("--role-credential", f->files.role_credential_file,
                  "file holding this role's credential instead of the cluster token, from "
                  "`sluice token derive` (default: $SLUICE_ROLE_CREDENTIAL_FILE); opens only "
                  "its role's calls");
  cmd->add_option("--tls-cert", f->files.tls_cert_file,
                  "PEM certificate for TLS on gRPC (with --tls-key)");
  cmd->add_option("--tls-key", f->files.tls_key_file, "PEM private key of --tls-cert");
  cmd->add_option("--tls-ca", f->files.tls_ca_file,
                  "PEM CA: clients verify servers against it; servers given it require client "
                  "certificates signed by it (mutual TLS)");
  cmd->add_option("--tls-server-name", f->server_name,
                  "the name servers' certificates must carry, instead of the address dialed "
                  "(one cluster certificate for servers that move between addresses)");
  cmd->add_flag("--insecure", f->insecure,
                "allow an open cluster (no --cluster-token), or gRPC without TLS, on a "
                "non-loopback address");
  cmd->add_flag("--encrypt-data", f->encrypt_data,
                "encrypt transfer payload between hosts (AES-256-GCM keyed from the cluster "
                "token; every host of the cluster must give it)");
  return [f](const std::string& role, const std::vector<std::string>& listens,
             bool grpc) -> std::optional<SecurityConfig> {
    Result<SecurityConfig> s = LoadSecurity(f->files);
    if (!s.ok()) {
      std::cerr << role << ": " << s.status().message() << "\n";
      return std::nullopt;
    }
    if (grpc && !s->credential.role.empty()) {
      std::cerr << role
                << ": serves gRPC to every role, so it needs the cluster token "
                   "(--cluster-token), not a role credential (--role-credential)\n";
      return std::nullopt;
    }
    s->tls_server_name = f->server_name;
    s->insecure = f->insecure;
    s->encrypt_data = f->encrypt_data;
    if (s->encrypt_data && s->open()) {
      std::cerr << role
                << ": --encrypt-data needs --cluster-token or --role-credential (its keys come "
                   "from the token)\n";
      return std::nullopt;
    }
    if (!s->tls_server_name.empty() && !s->client_tls()) {
      std::cerr << role << ": --tls-server-name needs TLS (--tls-ca or --tls-cert)\n";
      return std::nullopt;
    }
    for (const std::string& listen : listens) {
      if (Status c = CheckListenSecurity(role, listen, *s, f->insecure, grpc); !c.ok()) {
        std::cerr << c.message() << "\n";
        return std::nullopt;
      }
    }
    return std::move(*s);
  };
}

}  // namespace sluice::cli
