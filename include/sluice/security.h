// The cluster credential and TLS material every role takes: one secret
// token, the same on every host, and optionally certificates for TLS on the
// gRPC faces. Roles read them from files named by flags (`--cluster-token`,
// `--tls-cert`, `--tls-key`, `--tls-ca`), a YAML config's keys of the same
// names, or the environment (SLUICE_CLUSTER_TOKEN_FILE, SLUICE_TLS_CERT_FILE,
// SLUICE_TLS_KEY_FILE, SLUICE_TLS_CA_FILE).
//
// With a token: the store master and the orchestrator's worker service
// refuse every gRPC call without it (kUnauthenticated); the master's fast
// lane proves it per connection by HMAC over a server nonce; the transfer
// engine's handshake secret is derived from it. The token itself never
// crosses the network: each face gets its own key derived from it. What is
// and is not protected: README "Security".
#ifndef SLUICE_SECURITY_H_
#define SLUICE_SECURITY_H_

#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice {

// What a role holds instead of the cluster token (`--role-credential`, made
// by `sluice token derive`): its role and keys derived from the token for
// the faces it uses. Its gRPC key opens only its role's methods (a worker
// cannot register a store node); it cannot derive another role's keys.
struct RoleCredential {
  std::string role;           // "node", "worker" or "client"; empty: none.
  std::string grpc_key;       // Signs its gRPC calls (64 hex digits).
  std::string fast_lane_key;  // The store's fast lane; empty for a node.
  std::string transfer_key;   // The transfer engine's handshake secret.
};

// The roles a credential may be made for.
inline constexpr const char* kCredentialRoles[] = {"node", "worker", "client"};

struct SecurityConfig {
  // The cluster token's bytes (16..4096, surrounding whitespace trimmed).
  // Empty (and no `credential`): an open cluster, as on a developer's
  // loopback.
  std::string token;
  // A role credential, instead of the token (never both).
  RoleCredential credential;
  // PEM text, not paths. A server serves TLS when `tls_cert` and `tls_key`
  // are set, and then requires client certificates signed by `tls_ca` when
  // that is set too (mutual TLS). A client dials TLS when `tls_ca` is set,
  // verifying the server against it, and presents `tls_cert`/`tls_key` when
  // set. A server certificate must name the address its clients dial (a DNS
  // or IP subject alternative name).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  // The name a client checks a server's certificate for instead of the
  // host it dials: one cluster certificate naming one DNS name, while
  // servers move between addresses (pods). Empty: the dialed host.
  std::string tls_server_name;
  // The operator's --insecure: open or plaintext faces beyond loopback are
  // allowed (with a warning). Set by the CLI; CheckHttpListenSecurity reads
  // it for the HTTP front.
  bool insecure = false;
  // The operator's --encrypt-data: transfer engines encrypt tcp payload
  // (EngineConfig::encrypt_data; needs the token, which keys it), and
  // targets refuse initiators that do not.
  bool encrypt_data = false;

  bool open() const { return token.empty() && credential.role.empty(); }
  bool server_tls() const { return !tls_cert.empty(); }
  // A role with a CA or a certificate of its own dials TLS (without a CA it
  // verifies servers against the system's roots); never plaintext.
  bool client_tls() const { return !tls_ca.empty() || !tls_cert.empty(); }
};

// Where a role reads its security from. An empty path falls back to its
// environment variable (above); both empty: not set.
struct SecurityFiles {
  std::string token_file;
  std::string role_credential_file;  // --role-credential, SLUICE_ROLE_CREDENTIAL_FILE.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
};

// Reads every file named (directly or through the environment). Errors:
// kInvalidArgument naming the flag and file (unreadable, a token, role
// credential or TLS key file open to group or others, a token and a role
// credential both, a credential not as `sluice token derive` writes it, a
// token outside 16..4096 bytes, not PEM, a certificate without its key or
// a key without its certificate).
Result<SecurityConfig> LoadSecurity(const SecurityFiles& files);

// The text of `role`'s credential file (RoleCredential) for a cluster with
// `token`: "key value" lines. kInvalidArgument for an unknown role or an
// empty token. The text holds no way back to the token.
Result<std::string> RoleCredentialText(std::string_view token, std::string_view role);

// The transfer engine's handshake secret (EngineConfig::secret) for this
// cluster: a key derived from the token (or the role credential's);
// empty for an open cluster. (Its
// EngineConfig::encrypt_data is `security.encrypt_data`.)
std::string TransferSecret(const SecurityConfig& security);

// A role about to listen on `listen` ("host:port"). Open and on a loopback
// address: OK, with a warning that the cluster is open; open on any other
// address: kInvalidArgument unless `insecure` (then the warning). With a
// token, a gRPC face (`grpc`) on a non-loopback address must serve TLS
// (its calls' contents, prompts and results, would otherwise travel in
// the clear and could be altered): kInvalidArgument unless `insecure`
// (then a warning). `role` names the process in the message.
Status CheckListenSecurity(std::string_view role, std::string_view listen,
                           const SecurityConfig& security, bool insecure, bool grpc = false);

// A secret's file (a token, a TLS key, API keys) must be its owner's only:
// one that others can read is no secret, one they can write they can
// replace. kInvalidArgument naming `what`, the path and its mode otherwise
// (or when it cannot be read).
Status CheckSecretFile(std::string_view what, const std::string& path);

// A role about to serve the HTTP API on `listen`. Beyond loopback without
// API keys anyone who reaches it may submit, read and cancel any job:
// kInvalidArgument unless `insecure` (then a warning). On loopback, or with
// keys: OK.
Status CheckHttpListenSecurity(std::string_view role, std::string_view listen, bool has_api_keys,
                               bool insecure);

}  // namespace sluice

#endif  // SLUICE_SECURITY_H_
