// The cluster credential and TLS on gRPC faces: channels that sign every
// call with the cluster's gRPC key (call_mac.h: a MAC over the method, the
// time and a nonce; the key never crosses the wire, and a captured call
// cannot be replayed), server credentials that check each call's proof
// before its message is read, and the check each handler runs first. TLS
// hides the calls' contents.
#ifndef SLUICE_COMMON_RPC_AUTH_H_
#define SLUICE_COMMON_RPC_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "sluice/security.h"

#include "common/security_keys.h"

namespace sluice::internal {

// A channel to `target` ("host:port"): TLS when `security.client_tls()`,
// every call signed with the cluster's gRPC key when it has a token.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const SecurityConfig& security,
                                           const grpc::ChannelArguments& args = {});

// TLS server credentials when `security.server_tls()` (mutual TLS when it
// has a CA too), else insecure ones. With a token, each call's headers are
// checked for the cluster key before its message is read (a refused call
// never makes the server buffer its body), refusals logged under `face` at
// most once a second.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const SecurityConfig& security,
                                                               std::string face);

// Checks the credential of each incoming call. Thread-safe.
class CallAuthenticator {
 public:
  // `face` names the service in logs ("store master", "orchestrator").
  CallAuthenticator(const SecurityConfig& security, std::string face);

  // OK when the cluster is open or the server credentials checked the
  // call's proof; else UNAUTHENTICATED, logged with the peer's address (at
  // most one line a second, with a count of those not logged).
  grpc::Status Check(const grpc::ServerContextBase& ctx);
  // For a unary callback handler's first line: null when Check passes,
  // else `ctx`'s reactor, already finished with Check's refusal.
  grpc::ServerUnaryReactor* Refused(grpc::CallbackServerContext* ctx);

  // Calls refused so far.
  std::uint64_t refused() const { return log_.count(); }

 private:
  const std::string key_;  // Empty: open.
  RefusalLog log_;
};

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_RPC_AUTH_H_
