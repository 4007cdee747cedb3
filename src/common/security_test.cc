#include "sluice/security.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

#include "common/security_keys.h"

namespace sluice {
namespace {

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-security-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::unsetenv("SLUICE_CLUSTER_TOKEN_FILE");
    ::unsetenv("SLUICE_ROLE_CREDENTIAL_FILE");
  }
  void TearDown() override {
    ::unsetenv("SLUICE_CLUSTER_TOKEN_FILE");
    ::unsetenv("SLUICE_ROLE_CREDENTIAL_FILE");
    (void)!std::system(("rm -rf " + dir_).c_str());
  }
  // A file of `text` with `mode` (secrets: the owner's only).
  std::string Write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    return path;
  }
  std::string dir_;
};

TEST_F(SecurityTest, ATokenFileIsReadAndTrimmed) {
  SecurityFiles f;
  f.token_file = Write("token", "  0123456789abcdef0123\n");
  Result<SecurityConfig> s = LoadSecurity(f);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->token, "0123456789abcdef0123");
  EXPECT_FALSE(s->open());
  EXPECT_FALSE(s->server_tls());
  EXPECT_FALSE(s->client_tls());
}

TEST_F(SecurityTest, TheEnvironmentNamesTheTokenFileWhenNoFlagDoes) {
  ::setenv("SLUICE_CLUSTER_TOKEN_FILE", Write("token", "fedcba9876543210fedcba").c_str(), 1);
  Result<SecurityConfig> s = LoadSecurity({});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->token, "fedcba9876543210fedcba");
  SecurityFiles f;
  f.token_file = Write("flag", "the-flag-wins-over-the-env");
  EXPECT_EQ(LoadSecurity(f)->token, "the-flag-wins-over-the-env");
}

TEST_F(SecurityTest, NoFilesMeansAnOpenCluster) {
  Result<SecurityConfig> s = LoadSecurity({});
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->open());
  EXPECT_EQ(TransferSecret(*s), "");
}

TEST_F(SecurityTest, BadFilesAreRefusedNamingTheFlagAndFile) {
  SecurityFiles f;
  f.token_file = dir_ + "/missing";
  Status s = LoadSecurity(f).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--cluster-token " + dir_ + "/missing"), std::string_view::npos);

  f.token_file = Write("short", "tooshort\n");
  s = LoadSecurity(f).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("16..4096 bytes (got 8)"), std::string_view::npos) << s.message();

  f.token_file = Write("blank", "\n\n");
  EXPECT_EQ(LoadSecurity(f).status().code(), StatusCode::kInvalidArgument);

  SecurityFiles tls;
  tls.tls_cert_file = Write("cert.pem", "-----BEGIN CERTIFICATE-----\n");
  s = LoadSecurity(tls).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls-cert and --tls-key go together"), std::string_view::npos);

  tls.tls_key_file = Write("key.txt", "not a key");
  s = LoadSecurity(tls).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls-key " + dir_ + "/key.txt: not a PEM file"),
            std::string_view::npos)
      << s.message();
}

TEST_F(SecurityTest, SecretsOpenToOtherUsersAreRefusedNamingTheMode) {
  for (const mode_t mode : {0640, 0604, 0660, 0602}) {
    SecurityFiles f;
    f.token_file = Write("token", "0123456789abcdef0123\n", mode);
    const Status s = LoadSecurity(f).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << std::oct << mode;
    EXPECT_NE(s.message().find("open to other users"), std::string_view::npos) << s.message();
  }
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", 0644u);
  SecurityFiles tls;
  tls.tls_cert_file = Write("cert.pem", "-----BEGIN CERTIFICATE-----\n", 0644);  // Public.
  tls.tls_key_file = Write("key.pem", "-----BEGIN PRIVATE KEY-----\n", 0644);
  Status s = LoadSecurity(tls).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls-key " + dir_ + "/key.pem: open to other users (mode " +
                             std::string(mode) + ")"),
            std::string_view::npos)
      << s.message();
  ASSERT_EQ(::chmod(tls.tls_key_file.c_str(), 0400), 0);
  EXPECT_TRUE(LoadSecurity(tls).ok()) << "a certificate may be public, its key not";
}

TEST_F(SecurityTest, EachFaceGetsItsOwnKeyAndNoneIsTheToken) {
  const std::string token = "0123456789abcdef0123456789abcdef";
  const std::string grpc = internal::DeriveKey(token, internal::kGrpcKeyPurpose);
  const std::string lane = internal::DeriveKey(token, internal::kFastLaneKeyPurpose);
  SecurityConfig s;
  s.token = token;
  const std::string transfer = TransferSecret(s);
  EXPECT_EQ(grpc.size(), 64u);
  EXPECT_NE(grpc, lane);
  EXPECT_NE(grpc, transfer);
  EXPECT_NE(lane, transfer);
  EXPECT_EQ(grpc.find(token), std::string::npos);
  EXPECT_EQ(grpc, internal::DeriveKey(token, internal::kGrpcKeyPurpose)) << "stable";
  EXPECT_NE(grpc, internal::DeriveKey(token + "x", internal::kGrpcKeyPurpose));
  EXPECT_TRUE(internal::SecureEquals(grpc, grpc));
  EXPECT_FALSE(internal::SecureEquals(grpc, lane));
  EXPECT_FALSE(internal::SecureEquals(grpc, grpc.substr(1)));
}

// A KeyedHmac is HMAC-SHA256 of its parts joined, every time (its key is
// set up once and reused): the RFC 4231 test case 2 vector, twice.
TEST_F(SecurityTest, ARoleCredentialHoldsItsRolesKeysAndNotTheToken) {
  const std::string token = "0123456789abcdef0123";
  SecurityConfig cluster;
  cluster.token = token;
  // HMAC-SHA256(token, "sluice-v1/grpc/role/worker"), computed apart.
  EXPECT_EQ(internal::RoleGrpcKey(token, "worker"),
            "178ed4b2cba2cf57fc30f7b85a2a1c29ea14bf951c5f2cee4466c58fcb1b5907");
  for (const char* role : kCredentialRoles) {
    SCOPED_TRACE(role);
    Result<std::string> text = RoleCredentialText(token, role);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(text->find(token), std::string::npos);
    EXPECT_EQ(text->find(internal::GrpcCallKey(cluster)), std::string::npos)
        << "the cluster's gRPC key (every method) is not in it";
    SecurityFiles f;
    f.role_credential_file = Write(std::string(role) + ".cred", *text);
    Result<SecurityConfig> s = LoadSecurity(f);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_FALSE(s->open());
    EXPECT_EQ(s->token, "");
    EXPECT_EQ(s->credential.role, role);
    EXPECT_EQ(internal::GrpcCallKey(*s), internal::RoleGrpcKey(token, role));
    EXPECT_EQ(TransferSecret(*s), TransferSecret(cluster)) << "engines of every role meet";
    EXPECT_EQ(internal::FastLaneKey(*s),
              std::string(role) == "node" ? "" : internal::FastLaneKey(cluster));
  }
  EXPECT_NE(internal::RoleGrpcKey(token, "worker"), internal::RoleGrpcKey(token, "node"));
}

TEST_F(SecurityTest, BadRoleCredentialsAreRefusedNamingWhy) {
  EXPECT_NE(RoleCredentialText("0123456789abcdef0123", "admin")
                .status()
                .message()
                .find("unknown role \"admin\" (one of node, worker, client)"),
            std::string::npos);
  EXPECT_FALSE(RoleCredentialText("", "worker").ok());
  const std::string good = *RoleCredentialText("0123456789abcdef0123", "worker");
  const std::string key(64, 'a');
  const auto why = [&](const std::string& text, mode_t mode = 0600) {
    SecurityFiles f;
    f.role_credential_file = Write("cred", text, mode);
    Result<SecurityConfig> s = LoadSecurity(f);
    return s.ok() ? std::string("loaded") : std::string(s.status().message());
  };
  EXPECT_EQ(why(good), "loaded");
  EXPECT_NE(why(good + "token " + key + "\n").find("unknown entry \"token\""), std::string::npos);
  EXPECT_NE(why("role admin\n").find("line 1: role must be one of node, worker, client"),
            std::string::npos);
  EXPECT_NE(why("role worker\ngrpc 12ab\n").find("line 2: \"grpc\" must be 64 lowercase hex"),
            std::string::npos);
  EXPECT_NE(why("role worker\nrole worker\n").find("\"role\" given twice"), std::string::npos);
  EXPECT_NE(why("role worker\ngrpc " + key + "\ntransfer " + key + "\n").find("incomplete"),
            std::string::npos)
      << "a worker needs its fast lane key";
  EXPECT_NE(why(good, 0640).find("open to other users (mode 0640)"), std::string::npos);
  SecurityFiles both;
  both.token_file = Write("token", "0123456789abcdef0123");
  both.role_credential_file = Write("cred2", good);
  EXPECT_NE(LoadSecurity(both).status().message().find("not both"), std::string::npos);
  ::setenv("SLUICE_ROLE_CREDENTIAL_FILE", both.role_credential_file.c_str(), 1);
  EXPECT_EQ(LoadSecurity({})->credential.role, "worker") << "the environment names it too";
}

TEST(KeyedHmacTest, EachMacIsTheHmacOfItsPartsJoined) {
  const internal::KeyedHmac mac("Jefe");
  ASSERT_TRUE(mac.valid());
  for (int i = 0; i < 2; ++i) {
    std::array<std::uint8_t, 32> out{};
    ASSERT_TRUE(mac.Compute({"what do ya want ", "", "for nothing?"}, &out));
    EXPECT_EQ(internal::LowerHex(out.data(), out.size()),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  }
  std::array<std::uint8_t, 32> out{};
  EXPECT_FALSE(internal::KeyedHmac().Compute({"x"}, &out));
}

TEST_F(SecurityTest, AnOpenClusterListensOnLoopbackOnlyUnlessToldInsecure) {
  SecurityConfig open;
  EXPECT_TRUE(CheckListenSecurity("master", "127.0.0.1:0", open, false).ok());
  EXPECT_TRUE(CheckListenSecurity("master", "[::1]:7000", open, false).ok());
  EXPECT_TRUE(CheckListenSecurity("master", "localhost:7000", open, false).ok());
  Status s = CheckListenSecurity("sluice master", "0.0.0.0:7000", open, false);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--insecure"), std::string_view::npos);
  EXPECT_NE(s.message().find("0.0.0.0:7000"), std::string_view::npos);
  EXPECT_TRUE(CheckListenSecurity("master", "0.0.0.0:7000", open, true).ok());
  SecurityConfig closed;
  closed.token = "0123456789abcdef";
  EXPECT_TRUE(CheckListenSecurity("worker", "10.0.0.5:7000", closed, false).ok())
      << "a data face (the transfer engine) is not gRPC";
  // A gRPC face with a token beyond loopback serves TLS, or says --insecure.
  s = CheckListenSecurity("sluice master", "10.0.0.5:7000", closed, false, true);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls-cert"), std::string_view::npos) << s.message();
  EXPECT_TRUE(CheckListenSecurity("master", "10.0.0.5:7000", closed, true, true).ok());
  EXPECT_TRUE(CheckListenSecurity("master", "127.0.0.1:7000", closed, false, true).ok());
  SecurityConfig tls = closed;
  tls.tls_cert = "-----BEGIN CERTIFICATE-----";
  tls.tls_key = "-----BEGIN PRIVATE KEY-----";
  EXPECT_TRUE(CheckListenSecurity("master", "10.0.0.5:7000", tls, false, true).ok());
  EXPECT_TRUE(tls.client_tls()) << "a role with a certificate dials TLS too";
  EXPECT_EQ(CheckListenSecurity("master", "nonsense", open, false).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(SecurityTest, AnOpenHttpApiServesOnLoopbackOnlyUnlessToldInsecure) {
  EXPECT_TRUE(CheckHttpListenSecurity("serve", "127.0.0.1:8000", false, false).ok());
  const Status s = CheckHttpListenSecurity("sluice serve", "0.0.0.0:8000", false, false);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--api-keys"), std::string_view::npos) << s.message();
  EXPECT_TRUE(CheckHttpListenSecurity("serve", "0.0.0.0:8000", true, false).ok());
  EXPECT_TRUE(CheckHttpListenSecurity("serve", "0.0.0.0:8000", false, true).ok());
  EXPECT_EQ(CheckHttpListenSecurity("serve", "nonsense", true, false).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
