// The cluster credential and TLS across processes: roles started with
// --cluster-token refuse workers, store clients and engine handshakes
// without it (and keep serving those with it); TLS with a wrong CA fails;
// a role credential opens only its role's calls.
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/security.h"
#include "sluice/store/client.h"
#include "sluice/transfer/engine.h"

#include "child_process.h"
#include "command_output.h"
#include "common/call_mac.h"
#include "common/security_keys.h"
#include "common/testing/test_pki.h"
#include "proto/orchestrator/v1/orchestrator.grpc.pb.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// A process's peak resident memory (VmHWM) in KiB; -1 if unreadable.
long PeakRssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      return std::stol(line.substr(6));
    }
  }
  return -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls `pred` every 20 ms for up to `within`.
bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) {
      return true;
    }
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

class ClusterSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-security-it-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    token_ = Write("token", "4f1c0e7d9a2b3c4d5e6f708192a3b4c5\n", 0600);
    wrong_ = Write("wrong", "ffffffffffffffffffffffffffffffff\n", 0600);
  }
  void TearDown() override { (void)!std::system(("rm -rf " + dir_).c_str()); }

  std::string Write(const std::string& name, const std::string& text, int mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    (void)!::chmod(path.c_str(), static_cast<mode_t>(mode));
    return path;
  }
  std::unique_ptr<ChildProcess> Spawn(std::vector<std::string> args, int banner_ms = 20000,
                                      const std::string& err = "") {
    args.insert(args.begin(), SLUICE_BIN);
    args.push_back("--exit-on-stdin-eof");
    return std::make_unique<ChildProcess>(std::move(args), banner_ms, err);
  }
  // Runs `sluice token derive --role ROLE --out PATH` on the test's token;
  // its exit status and output go to `*status` and `*out` when given, else
  // a failure fails the test.
  void Derive(const std::string& role, const std::string& path, int* status = nullptr,
              std::string* out = nullptr) {
    int st = 0;
    const std::string printed =
        CommandOutput(std::string(SLUICE_BIN) + " token derive --role " + role +
                          " --cluster-token " + token_ + " --out " + path + " 2>&1",
                      &st);
    if (status != nullptr) {
      *status = st;
      *out = printed;
    } else {
      EXPECT_EQ(st, 0) << printed;
    }
  }
  static SecurityConfig Security(const std::string& token_file) {
    SecurityFiles f;
    f.token_file = token_file;
    Result<SecurityConfig> s = LoadSecurity(f);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : SecurityConfig{};
  }
  static std::unique_ptr<TransferEngine> Engine(const SecurityConfig& s) {
    EngineConfig ec;
    ec.secret = TransferSecret(s);
    auto e = TransferEngine::Create(ec);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(*e);
  }
  // `retry`: how long a refused call keeps asking (a refused TLS handshake
  // looks like a master that is down, so it is asked again until then).
  static Result<std::unique_ptr<StoreClient>> Client(TransferEngine* e, const std::string& master,
                                                     const SecurityConfig& s,
                                                     std::chrono::milliseconds retry = 30s) {
    StoreClientConfig c;
    c.master = master;
    c.security = s;
    c.rpc_timeout = 3000ms;
    c.master_retry = retry;
    c.staging_bytes = 1 << 20;
    return StoreClient::Create(e, c);
  }

  std::string dir_, token_, wrong_;
};

TEST_F(ClusterSecurityTest, AWorkerWithoutTheCredentialIsRefusedAndNoJobReachesIt) {
  const std::string orch_log = dir_ + "/orchestrator.log";
  auto master = Spawn({"master", "--cluster-token", token_});
  ASSERT_EQ(master->Word(1), "master") << master->banner();
  auto node = Spawn(
      {"store-node", "--master", master->Word(2), "--memory", "64MiB", "--cluster-token", token_});
  ASSERT_EQ(node->Word(1), "store-node") << node->banner();
  auto orch = Spawn({"orchestrator", "--store-master", master->Word(2), "--cluster-token", token_},
                    20000, orch_log);
  ASSERT_EQ(orch->Word(1), "orchestrator") << orch->banner();
  httplib::Client http("http://" + orch->Word(3));
  http.set_read_timeout(60, 0);

  // Strangers: a full pipeline of workers with no token, and one with a
  // wrong one. None is accepted, so none prints READY.
  std::vector<std::unique_ptr<ChildProcess>> strangers;
  for (const char* stage : {"encode", "denoise", "decode"}) {
    strangers.push_back(Spawn({"worker", "--stage", stage, "--orchestrator", orch->Word(2),
                               "--master", master->Word(2), "--checkpoint-every", "0"},
                              1500));
  }
  strangers.push_back(Spawn({"worker", "--stage", "denoise", "--orchestrator", orch->Word(2),
                             "--master", master->Word(2), "--cluster-token", wrong_},
                            1500));
  for (auto& s : strangers) {
    EXPECT_EQ(s->banner(), "") << "a worker without the credential registered";
  }
  auto sub = http.Post(
      "/v1/videos",
      json{{"prompt", "a lighthouse"}, {"size", "64x64"}, {"steps", 2}, {"seconds", "1"}}.dump(),
      "application/json");
  ASSERT_TRUE(sub && sub->status == 200) << (sub ? sub->body : "no answer");
  const std::string id = json::parse(sub->body).value("id", "");
  std::this_thread::sleep_for(1s);
  auto job = http.Get("/v1/jobs/" + id);
  ASSERT_TRUE(job && job->status == 200);
  EXPECT_EQ(json::parse(job->body).value("status", ""), "queued") << job->body;

  const std::string log = ReadFile(orch_log);
  EXPECT_NE(log.find("orchestrator: refused a call"), std::string::npos) << log;
  EXPECT_NE(log.find("no cluster credential"), std::string::npos) << log;

  // The cluster's own workers are served, and the job runs on them: the
  // denoise worker holds only a worker's credential (`sluice token derive`).
  const std::string worker_cred = dir_ + "/worker.cred";
  Derive("worker", worker_cred);
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (const char* stage : {"encode", "denoise", "decode"}) {
    const bool by_credential = std::string(stage) == "denoise";
    workers.push_back(
        Spawn({"worker", "--stage", stage, "--orchestrator", orch->Word(2), "--master",
               master->Word(2), by_credential ? "--role-credential" : "--cluster-token",
               by_credential ? worker_cred : token_}));
    ASSERT_EQ(workers.back()->Word(1), "worker") << workers.back()->banner();
  }
  std::string status;
  EXPECT_TRUE(Eventually(
      [&] {
        auto j = http.Get("/v1/jobs/" + id);
        status = j && j->status == 200 ? json::parse(j->body).value("status", "") : "";
        return status == "succeeded" || status == "failed";
      },
      120s));
  EXPECT_EQ(status, "succeeded");
  auto models = http.Get("/v1/models/sluice-reference");
  ASSERT_TRUE(models && models->status == 200);
  const json model = json::parse(models->body);  // Outlives the loop over its stages.
  for (const json& stage : model["stages"]) {
    EXPECT_EQ(stage.value("workers", -1), 1) << "only the credentialed workers: " << models->body;
  }
}

// The key is checked from a call's headers: a stranger's 200 MiB message
// is refused without the server reading it (it used to be read whole, the
// orchestrator's memory growing by its size, before the check).
TEST_F(ClusterSecurityTest, AnUnauthenticatedHugeCallIsRefusedBeforeItsMessageIsRead) {
  auto orch = Spawn({"orchestrator", "--cluster-token", token_});
  ASSERT_EQ(orch->Word(1), "orchestrator") << orch->banner();
  const long before = PeakRssKiB(orch->pid());
  ASSERT_GT(before, 0);
  auto stub = ::sluice::orchestrator::v1::Orchestrator::NewStub(
      grpc::CreateChannel(orch->Word(2), grpc::InsecureChannelCredentials()));
  ::sluice::orchestrator::v1::RegisterRequest reg;
  reg.set_stage("encode");
  reg.set_capacity(1);
  reg.set_name(std::string(200u << 20, 'x'));
  ::sluice::orchestrator::v1::RegisterResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  const grpc::Status s = stub->Register(&ctx, reg, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  const long after = PeakRssKiB(orch->pid());
  EXPECT_LT(after - before, 48 * 1024) << "peak RSS " << before << " -> " << after << " KiB";
  // It keeps serving.
  httplib::Client http("http://" + orch->Word(3));
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// A gRPC call carries a proof, never the key: a captured proof replayed,
// or used for another method, is refused, and the key itself (the bearer
// value calls carried before) opens nothing.
TEST_F(ClusterSecurityTest, ACapturedCallCannotBeReplayedAndTheKeyIsNotABearer) {
  auto orch = Spawn({"orchestrator", "--cluster-token", token_});
  ASSERT_EQ(orch->Word(1), "orchestrator") << orch->banner();
  const std::string key =
      internal::DeriveKey("4f1c0e7d9a2b3c4d5e6f708192a3b4c5", internal::kGrpcKeyPurpose);
  auto stub = ::sluice::orchestrator::v1::Orchestrator::NewStub(
      grpc::CreateChannel(orch->Word(2), grpc::InsecureChannelCredentials()));
  auto call = [&](const std::string& header, const std::string& value) {
    ::sluice::orchestrator::v1::RegisterRequest reg;
    reg.set_stage("encode");
    reg.set_capacity(1);
    ::sluice::orchestrator::v1::RegisterResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    ctx.AddMetadata(header, value);
    return stub->Register(&ctx, reg, &resp);
  };
  const std::string method = "/sluice.orchestrator.v1.Orchestrator/Register";
  const std::string proof = internal::SignCall(key, method, internal::UnixMillis());
  grpc::Status s = call(internal::kCallMacMetadataKey, proof);
  ASSERT_TRUE(s.ok()) << s.error_message();
  s = call(internal::kCallMacMetadataKey, proof);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("replayed"), std::string::npos) << s.error_message();
  s = call(
      internal::kCallMacMetadataKey,
      internal::SignCall(key, "/sluice.orchestrator.v1.Orchestrator/Done", internal::UnixMillis()));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "a proof for another method";
  s = call(internal::kCallMacMetadataKey,
           internal::SignCall(key, method, internal::UnixMillis() - 120'000));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "a stale proof";
  s = call("x-sluice-cluster-key", key);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "the key as a bearer value";
  EXPECT_TRUE(
      call(internal::kCallMacMetadataKey, internal::SignCall(key, method, internal::UnixMillis()))
          .ok())
      << "a fresh proof is served";
}

TEST_F(ClusterSecurityTest, TheStoreRefusesClientsAndHandshakesWithoutTheCredential) {
  auto master = Spawn({"master", "--cluster-token", token_});
  ASSERT_EQ(master->Word(1), "master") << master->banner();
  auto node = Spawn(
      {"store-node", "--master", master->Word(2), "--memory", "64MiB", "--cluster-token", token_});
  ASSERT_EQ(node->Word(1), "store-node") << node->banner();

  const SecurityConfig ours = Security(token_);
  auto engine = Engine(ours);
  auto client = Client(engine.get(), master->Word(2), ours);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const std::vector<std::byte> value(64 << 10, std::byte{0x5a});
  Status put;
  ASSERT_TRUE(Eventually(
      [&] {
        put = (*client)->Put("live", value);
        return put.ok();
      },
      10s))
      << put.ToString();

  for (const SecurityConfig& stranger : {SecurityConfig{}, Security(wrong_)}) {
    auto e = Engine(stranger);
    auto c = Client(e.get(), master->Word(2), stranger);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ((*c)->Put("forged", value).code(), StatusCode::kUnauthenticated);
    EXPECT_EQ((*c)->Remove("live").code(), StatusCode::kUnauthenticated);
    EXPECT_EQ((*c)->Exists("live").status().code(), StatusCode::kUnauthenticated);
    EXPECT_EQ((*c)->Get("live").status().code(), StatusCode::kUnauthenticated);
    // The store node's engine: a handshake without the derived secret.
    Result<SegmentId> seg = e->OpenSegment(node->Word(3));
    EXPECT_EQ(seg.status().code(), StatusCode::kPermissionDenied) << seg.status().ToString();
  }
  Result<std::vector<std::byte>> back = (*client)->Get("live");
  ASSERT_TRUE(back.ok()) << "the live object survived the strangers: " << back.status().ToString();
  EXPECT_EQ(*back, value);
  EXPECT_TRUE(engine->OpenSegment(node->Word(3)).ok());
}

TEST_F(ClusterSecurityTest, ARoleCredentialOpensItsRolesCallsOnlyAndServersNeedTheToken) {
  // Credentials made as an operator would: new files, the owner's only,
  // without the token.
  std::map<std::string, std::string> cred;
  int status = 0;
  std::string out;
  for (const char* role : {"node", "worker", "client"}) {
    cred[role] = dir_ + "/" + role + ".cred";
    Derive(role, cred[role]);
    struct stat st {};
    ASSERT_EQ(::stat(cred[role].c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << role;
    EXPECT_EQ(ReadFile(cred[role]).find("4f1c0e7d9a2b3c4d5e6f708192a3b4c5"), std::string::npos);
  }
  Derive("node", cred["worker"], &status, &out);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("it is not overwritten"), std::string::npos) << out;
  Derive("admin", dir_ + "/admin.cred", &status, &out);
  EXPECT_NE(out.find("unknown role \"admin\""), std::string::npos) << out;
  out = CommandOutput("env -u SLUICE_CLUSTER_TOKEN_FILE " + std::string(SLUICE_BIN) +
                          " token derive --role node --out " + dir_ + "/tokenless.cred 2>&1",
                      &status);
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_NE(out.find("give --cluster-token"), std::string::npos) << out;

  // The master and the orchestrator check every role's calls: they need
  // the token itself.
  for (const char* server : {"master", "orchestrator"}) {
    out = CommandOutput("timeout 20 " + std::string(SLUICE_BIN) + " " + server +
                            " --role-credential " + cred["worker"] + " </dev/null 2>&1",
                        &status);
    EXPECT_EQ(WEXITSTATUS(status), 2) << out;
    EXPECT_NE(out.find("needs the cluster token"), std::string::npos) << out;
  }

  auto master = Spawn({"master", "--cluster-token", token_});
  ASSERT_EQ(master->Word(1), "master") << master->banner();
  // A worker's credential cannot register a store node (the node keeps
  // asking, as it would a master not yet up, and says why); a node's can.
  const std::string impostor_log = dir_ + "/impostor.log";
  auto impostor = Spawn({"store-node", "--master", master->Word(2), "--memory", "16MiB",
                         "--role-credential", cred["worker"]},
                        20000, impostor_log);
  ASSERT_EQ(impostor->Word(1), "store-node") << impostor->banner();
  EXPECT_TRUE(Eventually(
      [&] {
        return ReadFile(impostor_log)
                   .find(
                       "PermissionDenied: RegisterNode: store master: role worker may not call "
                       "/sluice.store.v1.Master/RegisterNode") != std::string::npos;
      },
      10s))
      << ReadFile(impostor_log);
  EXPECT_EQ(ReadFile(impostor_log).find("registered with master"), std::string::npos);
  auto node = Spawn({"store-node", "--master", master->Word(2), "--memory", "64MiB",
                     "--role-credential", cred["node"]});
  ASSERT_EQ(node->Word(1), "store-node") << node->banner();

  // A client holding only its credential stores and reads through that
  // node (gRPC, fast lane and transfer keys all from the credential).
  SecurityFiles files;
  files.role_credential_file = cred["client"];
  Result<SecurityConfig> client_sec = LoadSecurity(files);
  ASSERT_TRUE(client_sec.ok()) << client_sec.status().ToString();
  auto engine = Engine(*client_sec);
  auto client = Client(engine.get(), master->Word(2), *client_sec);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const std::vector<std::byte> value(64 << 10, std::byte{0x3c});
  Status put;
  ASSERT_TRUE(Eventually(
      [&] {
        put = (*client)->Put("by-credential", value);
        return put.ok();
      },
      10s))
      << put.ToString();
  Result<std::vector<std::byte>> back = (*client)->Get("by-credential");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, value);

  // A node's credential opens no store call.
  files.role_credential_file = cred["node"];
  Result<SecurityConfig> node_sec = LoadSecurity(files);
  ASSERT_TRUE(node_sec.ok()) << node_sec.status().ToString();
  auto node_engine = Engine(*node_sec);
  auto as_node = Client(node_engine.get(), master->Word(2), *node_sec, 3s);
  ASSERT_TRUE(as_node.ok()) << as_node.status().ToString();
  const Status s = (*as_node)->Remove("by-credential");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("may not call"), std::string::npos) << s.ToString();
  const Result<bool> still = (*client)->Exists("by-credential");
  EXPECT_TRUE(still.ok() && *still) << "the node's Remove did nothing";
}

TEST_F(ClusterSecurityTest, MutualTlsServesTheClusterAndRefusesAWrongCa) {
  const Pki pki = MakePki(dir_);
  ASSERT_FALSE(pki.ca.empty()) << "openssl failed";
  const std::vector<std::string> tls = {"--cluster-token", token_,  "--tls-cert", pki.cert,
                                        "--tls-key",       pki.key, "--tls-ca",   pki.ca};
  std::vector<std::string> margs = {"master"};
  margs.insert(margs.end(), tls.begin(), tls.end());
  auto master = Spawn(margs);
  ASSERT_EQ(master->Word(1), "master") << master->banner();
  std::vector<std::string> nargs = {"store-node", "--master", master->Word(2), "--memory", "64MiB"};
  nargs.insert(nargs.end(), tls.begin(), tls.end());
  auto node = Spawn(nargs);
  ASSERT_EQ(node->Word(1), "store-node") << node->banner();

  SecurityFiles f;
  f.token_file = token_;
  f.tls_cert_file = pki.cert;
  f.tls_key_file = pki.key;
  f.tls_ca_file = pki.ca;
  Result<SecurityConfig> good = LoadSecurity(f);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  auto engine = Engine(*good);
  auto client = Client(engine.get(), master->Word(2), *good);
  ASSERT_TRUE(client.ok());
  const std::vector<std::byte> value(4096, std::byte{7});
  Status put;
  ASSERT_TRUE(Eventually(
      [&] {
        put = (*client)->Put("over-tls", value);
        return put.ok();
      },
      10s))
      << "the node registers over mutual TLS and a put lands: " << put.ToString();

  f.tls_ca_file = pki.other_ca;  // Does not vouch for the master's certificate.
  Result<SecurityConfig> wrong_ca = LoadSecurity(f);
  ASSERT_TRUE(wrong_ca.ok());
  f.tls_ca_file = pki.ca;
  f.tls_cert_file.clear();
  f.tls_key_file.clear();
  Result<SecurityConfig> no_cert = LoadSecurity(f);  // The master requires a client certificate.
  ASSERT_TRUE(no_cert.ok());
  SecurityConfig plaintext = *good;
  plaintext.tls_ca.clear();
  plaintext.tls_cert.clear();
  plaintext.tls_key.clear();
  for (const SecurityConfig& s : {*wrong_ca, *no_cert, plaintext}) {
    auto e = Engine(s);
    auto c = Client(e.get(), master->Word(2), s, 1s);
    ASSERT_TRUE(c.ok());
    const Status st = (*c)->Exists("over-tls").status();
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.code(), StatusCode::kNotFound) << st.ToString();
  }
  EXPECT_TRUE((*client)->Exists("over-tls").ok()) << "the cluster is still served";
}

// The shipped deployments' recipe: scripts/make-cluster-tls.sh's one
// certificate for "sluice", every role serving and dialing mutual TLS with
// --tls-server-name sluice, a master beyond loopback.
TEST_F(ClusterSecurityTest, TheShippedTlsRecipeServesAClusterAtAnyAddress) {
  const std::string tls = dir_ + "/tls";
  ASSERT_EQ(std::system((std::string(SLUICE_SOURCE_DIR) + "/scripts/make-cluster-tls.sh " + tls +
                         " 1 >/dev/null")
                            .c_str()),
            0);
  const std::vector<std::string> flags = {"--tls-cert",        tls + "/tls.crt", "--tls-key",
                                          tls + "/tls.key",    "--tls-ca",       tls + "/ca.crt",
                                          "--tls-server-name", "sluice"};
  std::vector<std::string> margs = {"master", "--listen", "0.0.0.0:0", "--cluster-token", token_};
  margs.insert(margs.end(), flags.begin(), flags.end());
  auto master = Spawn(margs);
  ASSERT_EQ(master->Word(1), "master") << master->banner();
  const std::string at = "127.0.0.1:" + master->Word(2).substr(master->Word(2).rfind(':') + 1);
  // As shipped, the store node holds its role credential, not the token.
  Derive("node", dir_ + "/node.cred");
  std::vector<std::string> nargs = {
      "store-node", "--master", at, "--memory", "64MiB", "--role-credential", dir_ + "/node.cred"};
  nargs.insert(nargs.end(), flags.begin(), flags.end());
  auto node = Spawn(nargs);
  ASSERT_EQ(node->Word(1), "store-node") << node->banner();
  SecurityFiles f;
  f.token_file = token_;
  f.tls_cert_file = tls + "/tls.crt";
  f.tls_key_file = tls + "/tls.key";
  f.tls_ca_file = tls + "/ca.crt";
  Result<SecurityConfig> s = LoadSecurity(f);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  {
    // Without the name the certificate ("sluice") does not match the
    // address dialed (an IP, so no name lookup in this process).
    auto e = Engine(*s);
    auto c = Client(e.get(), at, *s, 1s);
    ASSERT_TRUE(c.ok());
    EXPECT_FALSE((*c)->Exists("recipe").ok());
  }
  s->tls_server_name = "sluice";
  auto engine = Engine(*s);
  auto client = Client(engine.get(), at, *s);
  ASSERT_TRUE(client.ok());
  Status put;
  EXPECT_TRUE(Eventually(
      [&] {
        put = (*client)->Put("recipe", std::vector<std::byte>(1000, std::byte{3}));
        return put.ok();
      },
      10s))
      << put.ToString();
}

TEST_F(ClusterSecurityTest, AnOpenClusterRefusesToListenBeyondLoopbackUnlessInsecure) {
  auto open = Spawn({"master", "--listen", "0.0.0.0:0"}, 5000);
  EXPECT_EQ(open->banner(), "");
  EXPECT_NE(open->Wait(5000), -1) << "it exits";
  auto insecure = Spawn({"master", "--listen", "0.0.0.0:0", "--insecure"});
  EXPECT_EQ(insecure->Word(1), "master") << insecure->banner();
  // With a token, gRPC beyond loopback needs TLS, or --insecure to say so.
  const std::string plain_log = dir_ + "/plain.log";
  auto plain =
      Spawn({"master", "--listen", "0.0.0.0:0", "--cluster-token", token_}, 5000, plain_log);
  EXPECT_EQ(plain->banner(), "");
  EXPECT_NE(plain->Wait(5000), -1) << "it exits";
  EXPECT_NE(ReadFile(plain_log).find("without TLS"), std::string::npos) << ReadFile(plain_log);
  auto said = Spawn({"master", "--listen", "0.0.0.0:0", "--cluster-token", token_, "--insecure"});
  EXPECT_EQ(said->Word(1), "master") << said->banner();
  const Pki pki = MakePki(dir_);
  ASSERT_FALSE(pki.ca.empty()) << "openssl failed";
  auto closed = Spawn({"master", "--listen", "0.0.0.0:0", "--cluster-token", token_, "--tls-cert",
                       pki.cert, "--tls-key", pki.key});
  EXPECT_EQ(closed->Word(1), "master") << closed->banner();
  auto short_token = Spawn({"master", "--cluster-token", Write("short", "abc", 0600)}, 5000);
  EXPECT_EQ(short_token->banner(), "");
}

}  // namespace
}  // namespace sluice::testing
