#include "common/rpc_auth.h"

#include <grpc/grpc_security.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/client_interceptor.h>

#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "common/call_mac.h"
#include "common/random.h"

namespace sluice::internal {
namespace {

// Adds the call's proof (call_mac.h), and the role it is signed as, to its
// initial metadata.
class KeyInterceptor final : public grpc::experimental::Interceptor {
 public:
  KeyInterceptor(const std::string* key, const std::string* role, const char* method)
      : key_(key), role_(role), method_(method) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      std::multimap<std::string, std::string>* md = methods->GetSendInitialMetadata();
      md->insert({kCallMacMetadataKey, SignCall(*key_, method_, UnixMillis())});
      if (!role_->empty()) {
        md->insert({kCallRoleMetadataKey, *role_});
      }
    }
    methods->Proceed();
  }

 private:
  const std::string* key_;
  const std::string* role_;
  const char* method_;  // The call's, owned by its ClientRpcInfo.
};

class KeyInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  KeyInterceptorFactory(std::string key, std::string role)
      : key_(std::move(key)), role_(std::move(role)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    // The channel owns the factory, so key_ and role_ outlive calls.
    return new KeyInterceptor(&key_, &role_, info->method() != nullptr ? info->method() : "");
  }

 private:
  const std::string key_;
  const std::string role_;
};

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const SecurityConfig& security,
                                           const grpc::ChannelArguments& args) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (security.client_tls()) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = security.tls_ca;
    o.pem_cert_chain = security.tls_cert;
    o.pem_private_key = security.tls_key;
    creds = grpc::SslCredentials(o);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments with_name = args;
  if (security.client_tls() && !security.tls_server_name.empty()) {
    with_name.SetSslTargetNameOverride(security.tls_server_name);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  if (!security.open()) {
    factories.push_back(std::make_unique<KeyInterceptorFactory>(
        GrpcCallKey(security), security.token.empty() ? security.credential.role : ""));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, creds, with_name,
                                                                 std::move(factories));
}

// The cluster key checked from a call's headers, before its message is
// read: a refused call is cancelled by the transport, so an unauthenticated
// peer cannot make the server buffer a large message. The handlers ask
// again (CallAuthenticator::Check) whether the proof their call carries is
// one this check passed: its nonce is remembered. (Nothing is written on
// the auth context: gRPC hands the processor the connection's context,
// shared by every call on it.)
struct HeaderKeyCheck {
  // A role's key and the methods it opens.
  struct Role {
    Role(std::string key, std::set<std::string, std::less<>> m)
        : verifier(std::move(key), std::chrono::seconds(60), 1 << 18, "role credential"),
          methods(std::move(m)) {}
    CallVerifier verifier;
    const std::set<std::string, std::less<>> methods;
  };

  // Without the token (a role credential only) every key is random:
  // nothing can sign a call this check passes.
  HeaderKeyCheck(const std::string& token, std::string face, const RoleMethods& roles)
      : cluster(Key(token, "")), log(std::move(face)) {
    for (const auto& [role, methods] : roles) {
      this->roles.emplace(std::piecewise_construct, std::forward_as_tuple(role),
                          std::forward_as_tuple(Key(token, role), methods));
    }
  }
  static std::string Key(const std::string& token, std::string_view role) {
    if (token.empty()) {
      return RandomId() + RandomId();
    }
    return role.empty() ? DeriveKey(token, kGrpcKeyPurpose) : RoleGrpcKey(token, role);
  }

  // The verifier for a call signed as `role` (empty: the cluster key) and,
  // for a role, the methods it opens (null: every method); a null verifier
  // for a role this face does not serve.
  using Lookup = std::pair<CallVerifier*, const std::set<std::string, std::less<>>*>;
  Lookup For(std::string_view role) {
    if (role.empty()) {
      return {&cluster, nullptr};
    }
    const auto it = roles.find(role);
    if (it == roles.end()) {
      return {nullptr, nullptr};
    }
    return {&it->second.verifier, &it->second.methods};
  }

  CallVerifier cluster;  // Calls signed by token holders: every method.
  std::map<std::string, Role, std::less<>> roles;
  RefusalLog log;
};

namespace {

std::string_view View(const grpc_slice& s) {
  return {reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)), GRPC_SLICE_LENGTH(s)};
}

std::string Details(const RefusalLog& log, std::string_view why, bool denied = false) {
  return log.face() + ": " + std::string(why) +
         (denied ? " (a role credential opens only its role's calls: `sluice token derive`)"
                 : " (every role of a cluster takes the same --cluster-token, or a role "
                   "credential derived from it)");
}

// The processor's state: a reference on the authenticator's check.
using CheckRef = std::shared_ptr<HeaderKeyCheck>;

void ProcessHeaders(void* state, grpc_auth_context* context, const grpc_metadata* md,
                    std::size_t num_md, grpc_process_auth_metadata_done_cb cb, void* user_data) {
  HeaderKeyCheck& check = **static_cast<CheckRef*>(state);
  std::string_view path, proof, role;
  for (std::size_t i = 0; i < num_md; ++i) {
    const std::string_view k = View(md[i].key);
    if (k == ":path") {
      path = View(md[i].value);
    } else if (k == kCallMacMetadataKey) {
      proof = View(md[i].value);
    } else if (k == kCallRoleMetadataKey) {
      role = View(md[i].value);
    }
  }
  std::string why = "no cluster credential";
  grpc_status_code code = GRPC_STATUS_UNAUTHENTICATED;
  const auto [verifier, methods] = check.For(role);
  if (verifier == nullptr) {
    why = "a call as role \"" + std::string(role.substr(0, 16)) + "\", which this face serves not";
  } else if (!proof.empty()) {
    const Status s = verifier->Verify(path, proof, UnixMillis());
    if (s.ok() && (methods == nullptr || methods->contains(path))) {
      cb(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);  // Nothing consumed.
      return;
    }
    if (s.ok()) {
      why = "role " + std::string(role) + " may not call " + std::string(path);
      code = GRPC_STATUS_PERMISSION_DENIED;
    } else {
      why = std::string(s.message());
    }
  }
  // The peer's address where the transport put it in the context (read
  // only: the context is the connection's).
  std::string from = "a call";
  grpc_auth_property_iterator it =
      grpc_auth_context_find_properties_by_name(context, GRPC_PEER_IP_PROPERTY_NAME);
  if (const grpc_auth_property* ip = grpc_auth_property_iterator_next(&it); ip != nullptr) {
    from += " from " + std::string(ip->value, ip->value_length);
  }
  check.log.Refused(from, why);
  const std::string details = Details(check.log, why, code == GRPC_STATUS_PERMISSION_DENIED);
  cb(user_data, nullptr, 0, nullptr, 0, code, details.c_str());
}

// Server credentials made in gRPC's core (insecure or TLS) with the header
// key check set: the C++ InsecureServerCredentials refuses a processor.
class CheckedServerCredentials final : public grpc::ServerCredentials {
 public:
  explicit CheckedServerCredentials(grpc_server_credentials* creds) : creds_(creds) {}
  ~CheckedServerCredentials() override { grpc_server_credentials_release(creds_); }
  CheckedServerCredentials(const CheckedServerCredentials&) = delete;
  CheckedServerCredentials& operator=(const CheckedServerCredentials&) = delete;

  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }
  grpc_server_credentials* creds_;
};

}  // namespace

CallAuthenticator::CallAuthenticator(const SecurityConfig& security, std::string face,
                                     const RoleMethods& roles) {
  if (!security.open()) {
    check_ = std::make_shared<HeaderKeyCheck>(security.token, std::move(face), roles);
  }
}

CallAuthenticator::~CallAuthenticator() = default;

std::shared_ptr<grpc::ServerCredentials> CallAuthenticator::ServerCredentials(
    const SecurityConfig& security) const {
  if (check_ == nullptr) {
    if (!security.server_tls()) {
      return grpc::InsecureServerCredentials();
    }
    grpc::SslServerCredentialsOptions o(
        security.tls_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    o.pem_root_certs = security.tls_ca;
    o.pem_key_cert_pairs.push_back({security.tls_key, security.tls_cert});
    return grpc::SslServerCredentials(o);
  }
  grpc_server_credentials* creds = nullptr;
  if (security.server_tls()) {
    grpc_ssl_pem_key_cert_pair pair{security.tls_key.c_str(), security.tls_cert.c_str()};
    creds = grpc_ssl_server_credentials_create_ex(
        security.tls_ca.empty() ? nullptr : security.tls_ca.c_str(), &pair, 1,
        security.tls_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY,
        nullptr);
  } else {
    creds = grpc_insecure_server_credentials_create();
  }
  grpc_server_credentials_set_auth_metadata_processor(
      creds, grpc_auth_metadata_processor{ProcessHeaders,
                                          [](void* state) { delete static_cast<CheckRef*>(state); },
                                          new CheckRef(check_)});
  return std::make_shared<CheckedServerCredentials>(creds);
}

grpc::Status CallAuthenticator::Check(const grpc::ServerContextBase& ctx) {
  if (check_ == nullptr) {
    return grpc::Status::OK;
  }
  const char* why = "no checked cluster credential";
  const auto& md = ctx.client_metadata();
  std::string_view role;
  if (auto it = md.find(kCallRoleMetadataKey); it != md.end()) {
    role = std::string_view(it->second.data(), it->second.size());
  }
  CallVerifier* verifier = check_->For(role).first;
  if (auto it = md.find(kCallMacMetadataKey); it != md.end() && verifier != nullptr) {
    const std::string_view nonce =
        ProofNonce(std::string_view(it->second.data(), it->second.size()));
    if (!nonce.empty() && verifier->Remembers(nonce)) {
      return grpc::Status::OK;
    }
  }
  check_->log.Refused("a call from " + ctx.peer(), why);
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, Details(check_->log, why));
}

grpc::ServerUnaryReactor* CallAuthenticator::Refused(grpc::CallbackServerContext* ctx) {
  grpc::Status s = Check(*ctx);
  if (s.ok()) {
    return nullptr;
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(s);
  return reactor;
}

std::uint64_t CallAuthenticator::refused() const {
  return check_ == nullptr ? 0 : check_->log.count();
}

}  // namespace sluice::internal
