// The cluster credential and TLS on gRPC faces: channels that sign every
// call with the cluster's gRPC key (call_mac.h: a MAC over the method, the
// time and a nonce; the key never crosses the wire, and a captured call
// cannot be replayed), server credentials that check each call's proof
// before its message is read, and the check each handler runs first. TLS
// hides the calls' contents.
#ifndef SLUICE_COMMON_RPC_AUTH_H_
#define SLUICE_COMMON_RPC_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "sluice/security.h"

#include "common/security_keys.h"

namespace sluice::internal {

// A channel to `target` ("host:port"): TLS when `security.client_tls()`,
// every call signed with the cluster's gRPC key when it has a token.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const SecurityConfig& security,
                                           const grpc::ChannelArguments& args = {});

struct HeaderKeyCheck;

// The methods ("/pkg.Service/Method") a face opens to each role credential
// (RoleCredential: "node", "worker", "client"); a role not listed may call
// nothing. Calls signed with the cluster key (by token holders) may call
// every method.
using RoleMethods = std::map<std::string, std::set<std::string, std::less<>>, std::less<>>;

// Checks the credential of each incoming call: once from its headers,
// before its message is read (the server credentials it makes), and again
// as each handler's first step. Thread-safe.
class CallAuthenticator {
 public:
  // `face` names the service in logs ("store master", "orchestrator");
  // `roles` are the methods each role credential opens. Every role's key
  // derives from `security`'s token: given only a role credential, the
  // face refuses every call (the CLI refuses to start such a server).
  CallAuthenticator(const SecurityConfig& security, std::string face,
                    const RoleMethods& roles = {});
  ~CallAuthenticator();
  CallAuthenticator(const CallAuthenticator&) = delete;
  CallAuthenticator& operator=(const CallAuthenticator&) = delete;

  // TLS server credentials when `security.server_tls()` (mutual TLS when it
  // has a CA too), else insecure ones. With a token, each call's headers
  // are checked for a proof under the cluster key before its message is
  // read (a refused call never makes the server buffer its body), refusals
  // logged under the face at most once a second. A call signed as a role
  // (kCallRoleMetadataKey) is checked under that role's key, and refused
  // PERMISSION_DENIED for a method outside its role. The credentials share
  // this authenticator's check (they may outlive it).
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const SecurityConfig& security) const;

  // OK when the cluster is open or the headers' check (ServerCredentials)
  // passed this call's proof; else UNAUTHENTICATED, logged with the peer's
  // address (at most one line a second, with a count of those not logged).
  // A server listening with other credentials refuses every call. Reads
  // nothing shared but the check's nonce set; writes nothing on the call.
  grpc::Status Check(const grpc::ServerContextBase& ctx);
  // For a unary callback handler's first line: null when Check passes,
  // else `ctx`'s reactor, already finished with Check's refusal.
  grpc::ServerUnaryReactor* Refused(grpc::CallbackServerContext* ctx);

  // Calls refused so far, by the headers' check and by Check.
  std::uint64_t refused() const;

 private:
  std::shared_ptr<HeaderKeyCheck> check_;  // Null: open.
};

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_RPC_AUTH_H_
