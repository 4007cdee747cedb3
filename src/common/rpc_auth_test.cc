// gRPC faces with a cluster token: many calls at once on one connection
// pass both checks and leave the connection's shared auth context as it
// was; a handler refuses calls whose headers were never checked; a wrong
// key is refused before any handler runs; a role credential opens only its
// role's methods.
#include "common/rpc_auth.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/log.h"

namespace sluice::internal {
namespace {

constexpr const char* kMethod = "/sluice.test.Ping/Ping";
constexpr const char* kNodeMethod = "/sluice.test.Ping/NodeOnly";

// The test face's roles: a worker may Ping, a node may call NodeOnly.
RoleMethods TestRoles() {
  return {{"worker", {kMethod}}, {"node", {kNodeMethod}}};
}

// Counts, per call its handler sees, the properties of the call's auth
// context, then answers Check's verdict.
class PingService final : public grpc::CallbackGenericService {
 public:
  explicit PingService(CallAuthenticator* auth) : auth_(auth) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    return new Reactor(this, ctx);
  }

  std::atomic<int> handled{0};
  std::atomic<std::size_t> min_properties{~std::size_t{0}};
  std::atomic<std::size_t> max_properties{0};

 private:
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    Reactor(PingService* svc, grpc::GenericCallbackServerContext* ctx) {
      svc->handled.fetch_add(1);
      std::size_t n = 0;
      const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
      for (auto it = auth->begin(); it != auth->end(); ++it) {
        ++n;
      }
      std::size_t lo = svc->min_properties.load();
      while (n < lo && !svc->min_properties.compare_exchange_weak(lo, n)) {
      }
      std::size_t hi = svc->max_properties.load();
      while (n > hi && !svc->max_properties.compare_exchange_weak(hi, n)) {
      }
      const grpc::Status s = svc->auth_->Check(*ctx);
      if (!s.ok()) {
        Finish(s);
        return;
      }
      grpc::Slice pong("pong");
      reply_ = grpc::ByteBuffer(&pong, 1);
      StartWriteAndFinish(&reply_, grpc::WriteOptions(), grpc::Status::OK);
    }
    void OnDone() override { delete this; }

   private:
    grpc::ByteBuffer reply_;
  };

  CallAuthenticator* auth_;
};

SecurityConfig Keyed(const std::string& token) {
  SecurityConfig s;
  s.token = token;
  return s;
}

const std::string kToken = "rpc-auth-test-token-0123456789";

class RpcAuthTest : public ::testing::Test {
 protected:
  // Serves PingService on loopback with `creds` (the authenticator's own
  // unless given).
  void Serve(std::shared_ptr<grpc::ServerCredentials> creds = nullptr) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", creds ? creds : auth_.ServerCredentials(Keyed(kToken)),
                       &port_);
    b.RegisterCallbackGenericService(&svc_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    if (server_) {
      server_->Shutdown();
    }
  }

  static grpc::Status Ping(grpc::GenericStub& stub, const std::string& method = kMethod) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    grpc::Slice ping("ping");
    grpc::ByteBuffer req(&ping, 1), resp;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &req, &resp,
                   [&done](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  }
  std::string Target() const { return "127.0.0.1:" + std::to_string(port_); }

  CallAuthenticator auth_{Keyed(kToken), "test face", TestRoles()};
  PingService svc_{&auth_};
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(RpcAuthTest, ConcurrentCallsOnOneConnectionLeaveItsAuthContextAlone) {
  Serve();
  grpc::GenericStub stub(MakeChannel(Target(), Keyed(kToken)));
  ASSERT_TRUE(Ping(stub).ok());  // One connection, up before the crowd.
  constexpr int kThreads = 8, kCalls = 150;
  std::atomic<int> ok{0};
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const grpc::Status s = Ping(stub);
        if (!s.ok()) {
          failures[t] = s.error_message();
          return;
        }
        ok.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  for (const std::string& f : failures) {
    EXPECT_EQ(f, "");
  }
  EXPECT_EQ(ok.load(), kThreads * kCalls);
  EXPECT_EQ(svc_.handled.load(), kThreads * kCalls + 1);
  EXPECT_EQ(auth_.refused(), 0u);
  // gRPC hands every call on a connection the same auth context: a check
  // that wrote on it would grow it by a property per call (and race with
  // the calls reading it).
  EXPECT_GT(svc_.max_properties.load(), 0u);
  EXPECT_EQ(svc_.max_properties.load(), svc_.min_properties.load());
}

TEST_F(RpcAuthTest, AHandlerRefusesCallsWhoseHeadersWereNeverChecked) {
  Serve(grpc::InsecureServerCredentials());  // The header check left out.
  grpc::GenericStub stub(MakeChannel(Target(), Keyed(kToken)));
  const grpc::Status s = Ping(stub);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_NE(s.error_message().find("no checked cluster credential"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(svc_.handled.load(), 1);
  EXPECT_EQ(auth_.refused(), 1u);
}

TEST_F(RpcAuthTest, AWrongKeyIsRefusedBeforeAnyHandlerRuns) {
  Serve();
  grpc::GenericStub stub(MakeChannel(Target(), Keyed("another-token-0123456789abcdef")));
  const grpc::Status s = Ping(stub);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_NE(s.error_message().find("test face: a wrong cluster credential"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(svc_.handled.load(), 0);
  EXPECT_EQ(auth_.refused(), 1u);
}

TEST_F(RpcAuthTest, AFloodOfRefusedCallsLogsAboutALineASecond) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
  Logger().sinks().push_back(sink);  // Before any call: nothing logs yet.
  Serve();
  grpc::GenericStub stub(MakeChannel(Target(), Keyed("another-token-0123456789abcdef")));
  constexpr int kCalls = 300;
  const auto start = std::chrono::steady_clock::now();
  int refused = 0;
  for (int i = 0; i < kCalls; ++i) {
    refused += Ping(stub).error_code() == grpc::StatusCode::UNAUTHENTICATED;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Logger().sinks().pop_back();
  int lines = 0;
  for (const std::string& line : sink->last_formatted()) {
    lines += line.find("test face: refused") != std::string::npos;
  }
  EXPECT_EQ(refused, kCalls);
  EXPECT_EQ(auth_.refused(), static_cast<std::uint64_t>(kCalls)) << "every refusal is counted";
  EXPECT_GE(lines, 1);
  EXPECT_LE(lines, 1 + static_cast<int>(seconds)) << kCalls << " refusals in " << seconds << " s";
  EXPECT_EQ(svc_.handled.load(), 0);
}

// A credential for `role`, as `sluice token derive` would write it, with
// its gRPC key from `key_role`'s.
SecurityConfig Credential(const std::string& role, const std::string& key_role = "") {
  SecurityConfig s;
  s.credential.role = role;
  s.credential.grpc_key = RoleGrpcKey(kToken, key_role.empty() ? role : key_role);
  s.credential.transfer_key = DeriveKey(kToken, kTransferKeyPurpose);
  return s;
}

TEST_F(RpcAuthTest, ARoleCredentialOpensOnlyItsRolesMethods) {
  Serve();
  grpc::GenericStub worker(MakeChannel(Target(), Credential("worker")));
  grpc::GenericStub node(MakeChannel(Target(), Credential("node")));
  grpc::GenericStub cluster(MakeChannel(Target(), Keyed(kToken)));
  EXPECT_TRUE(Ping(worker).ok());
  EXPECT_TRUE(Ping(node, kNodeMethod).ok());
  EXPECT_TRUE(Ping(cluster).ok()) << "the token opens every method";
  EXPECT_TRUE(Ping(cluster, kNodeMethod).ok());
  EXPECT_EQ(svc_.handled.load(), 4);

  grpc::Status s = Ping(worker, kNodeMethod);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("role worker may not call /sluice.test.Ping/NodeOnly"),
            std::string::npos)
      << s.error_message();
  s = Ping(node);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  grpc::GenericStub client(MakeChannel(Target(), Credential("client")));
  s = Ping(client);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "a role the face serves not";
  EXPECT_NE(s.error_message().find("\"client\", which this face serves not"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(svc_.handled.load(), 4) << "no refused call reached the handler";
  EXPECT_EQ(auth_.refused(), 3u);
}

TEST_F(RpcAuthTest, ARoleCannotSignAsAnother) {
  Serve();
  // Claims to be a worker, holds a node's key.
  grpc::GenericStub stub(MakeChannel(Target(), Credential("worker", "node")));
  const grpc::Status s = Ping(stub);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_NE(s.error_message().find("a wrong role credential"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(svc_.handled.load(), 0);
}

TEST_F(RpcAuthTest, AFaceGivenOnlyARoleCredentialRefusesEveryCall) {
  CallAuthenticator half(Credential("worker"), "half face", TestRoles());
  Serve(half.ServerCredentials(Credential("worker")));
  grpc::GenericStub stub(MakeChannel(Target(), Credential("worker")));
  const grpc::Status s = Ping(stub);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_EQ(svc_.handled.load(), 0);
}

TEST_F(RpcAuthTest, AnOpenFacePassesEveryCall) {
  CallAuthenticator open(SecurityConfig{}, "open face");
  PingService svc(&open);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", open.ServerCredentials(SecurityConfig{}), &port);
  b.RegisterCallbackGenericService(&svc);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);
  grpc::GenericStub stub(MakeChannel("127.0.0.1:" + std::to_string(port), SecurityConfig{}));
  EXPECT_TRUE(Ping(stub).ok());
  EXPECT_EQ(svc.handled.load(), 1);
  server->Shutdown();
}

}  // namespace
}  // namespace sluice::internal
