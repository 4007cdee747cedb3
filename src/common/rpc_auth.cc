#include "common/rpc_auth.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/client_interceptor.h>

#include <vector>

namespace sluice::internal {
namespace {

// Adds the key to each call's initial metadata.
class KeyInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit KeyInterceptor(const std::string* key) : key_(key) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({kAuthMetadataKey, *key_});
    }
    methods->Proceed();
  }

 private:
  const std::string* key_;
};

class KeyInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit KeyInterceptorFactory(std::string key) : key_(std::move(key)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new KeyInterceptor(&key_);  // The channel owns the factory, so key_ outlives calls.
  }

 private:
  const std::string key_;
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
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  if (!security.open()) {
    factories.push_back(
        std::make_unique<KeyInterceptorFactory>(DeriveKey(security.token, kGrpcKeyPurpose)));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, creds, args,
                                                                 std::move(factories));
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const SecurityConfig& security) {
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

CallAuthenticator::CallAuthenticator(const SecurityConfig& security, std::string face)
    : key_(DeriveKey(security.token, kGrpcKeyPurpose)), log_(std::move(face)) {}

grpc::Status CallAuthenticator::Check(const grpc::ServerContextBase& ctx) {
  if (key_.empty()) {
    return grpc::Status::OK;
  }
  const auto& md = ctx.client_metadata();
  const auto it = md.find(kAuthMetadataKey);
  if (it != md.end() &&
      SecureEquals(std::string_view(it->second.data(), it->second.size()), key_)) {
    return grpc::Status::OK;
  }
  const char* why = it == md.end() ? "no cluster credential" : "a wrong cluster credential";
  log_.Refused("a call from " + ctx.peer(), why);
  return grpc::Status(
      grpc::StatusCode::UNAUTHENTICATED,
      log_.face() + ": " + why + " (every role of a cluster takes the same --cluster-token)");
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

}  // namespace sluice::internal
