// The etcd client, publishers and elections against a real etcd (label
// etcd; skipped where /usr/bin/etcd is absent).
#include <httplib.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include <gtest/gtest.h>

#include "common/testing/eventually.h"
#include "common/testing/test_pki.h"
#include "discovery/etcd_client.h"
#include "discovery/membership.h"
#include "discovery/testing/etcd_server.h"
#include "discovery/testing/tls_etcd_test.h"

namespace sluice::discovery {
namespace {

using namespace std::chrono_literals;
using testing::EtcdServer;

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::Available()) {
      GTEST_SKIP() << "no /usr/bin/etcd (Debian's etcd-server)";
    }
    server_ = std::make_unique<EtcdServer>();
    auto c = EtcdClient::Create({server_->url()}, 1000ms);
    ASSERT_TRUE(c.ok());
    etcd_ = std::move(*c);
  }
  std::optional<std::string> Value(const std::string& key) {
    auto kv = etcd_->Get(key);
    return kv.ok() && kv->has_value() ? std::optional((*kv)->value) : std::nullopt;
  }

  std::unique_ptr<EtcdServer> server_;
  std::unique_ptr<EtcdClient> etcd_;
};

TEST(EtcdEndpointsTest, OnlyHttpOrHttpsHostPortUrlsAreAccepted) {
  auto two = ParseEtcdEndpoints("http://10.0.0.1:2379,https://[fd00::1]:2379");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u);
  for (const char* bad : {"", "10.0.0.1:2379", "ftp://h:2379", "http://h", "http://h:1,"}) {
    auto r = ParseEtcdEndpoints(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(EtcdClient::Create({}, 1s).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EtcdTest, KeysPrefixesAndCreateIfAbsent) {
  ASSERT_TRUE(etcd_->Put("/sluice/c/master", "10.0.0.1:7000").ok());
  ASSERT_TRUE(etcd_->Put("/sluice/c/node/a", std::string("bin\0ary", 7)).ok());
  ASSERT_TRUE(etcd_->Put("/sluice/d/master", "elsewhere").ok());
  EXPECT_EQ(Value("/sluice/c/master"), "10.0.0.1:7000");
  EXPECT_EQ(Value("/sluice/c/node/a"), std::string("bin\0ary", 7));
  EXPECT_EQ(Value("/sluice/c/none"), std::nullopt);
  auto all = etcd_->GetPrefix("/sluice/c/");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].key, "/sluice/c/master");
  EXPECT_EQ((*all)[1].key, "/sluice/c/node/a");
  EXPECT_EQ(*etcd_->CreateIfAbsent("/sluice/c/master", "me", 0), false);
  EXPECT_EQ(Value("/sluice/c/master"), "10.0.0.1:7000");
  EXPECT_EQ(*etcd_->CreateIfAbsent("/sluice/c/orchestrator", "me", 0), true);
  ASSERT_TRUE(etcd_->Delete("/sluice/c/master").ok());
  EXPECT_EQ(Value("/sluice/c/master"), std::nullopt);
}

TEST_F(EtcdTest, ALeasedKeyGoesWithItsLease) {
  auto lease = etcd_->Grant(5s);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(etcd_->Put("/k", "v", *lease).ok());
  EXPECT_EQ((*etcd_->Get("/k"))->lease, *lease);
  EXPECT_TRUE(etcd_->KeepAlive(*lease).ok());
  ASSERT_TRUE(etcd_->Revoke(*lease).ok());
  EXPECT_EQ(Value("/k"), std::nullopt);
  EXPECT_EQ(etcd_->KeepAlive(*lease).code(), StatusCode::kNotFound);
  const Status again = etcd_->Revoke(*lease);
  EXPECT_TRUE(again.ok()) << "revoking a gone lease is no error: " << again.ToString();
}

TEST_F(EtcdTest, UnreachableEtcdIsUnavailableAndARestartedOneServesAgain) {
  ASSERT_TRUE(etcd_->Put("/kept", "1").ok());
  server_->Kill();
  EXPECT_EQ(etcd_->Get("/kept").status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(server_->Start());
  EXPECT_EQ(Value("/kept"), "1") << "etcd keeps its data; the client reconnects";
}

TEST_F(EtcdTest, APublisherKeepsItsEntriesAndPutsThemBackWhenItsLeaseIsLost) {
  {
    auto p = Publisher::Start(etcd_.get(), {{"/sluice/c/node/a", "10.0.0.2:7300"}}, 2s);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    // Four renewals, every ttl/3: the lease outlived its ttl.
    EXPECT_TRUE(internal::Eventually([&] { return (*p)->renewed() >= 4; }, 10s));
    EXPECT_EQ(Value("/sluice/c/node/a"), "10.0.0.2:7300") << "renewed past its ttl";
    // The lease lost (as when it expired with etcd out of reach).
    ASSERT_TRUE(etcd_->Revoke((*etcd_->Get("/sluice/c/node/a"))->lease).ok());
    EXPECT_EQ(Value("/sluice/c/node/a"), std::nullopt);
    // The count moves once the entries are back (they may be seen first).
    EXPECT_TRUE(internal::Eventually([&] { return (*p)->republished() == 1; }, 10s));
    EXPECT_EQ(Value("/sluice/c/node/a"), "10.0.0.2:7300");
  }
  EXPECT_EQ(Value("/sluice/c/node/a"), std::nullopt) << "gone with its publisher";
}

TEST_F(EtcdTest, OneCampaignerLeadsAndAnotherTakesOverWhenItResigns) {
  auto never = [] { return false; };
  auto a = Election::Campaign(etcd_.get(), "/sluice/c/master", "a:7000", 2s, 100ms, never);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::atomic<bool> b_leads{false};
  std::unique_ptr<Election> b;
  // A campaign asks `stop` before each attempt: its third question means
  // two attempts were made and lost.
  std::atomic<int> b_asked{0};
  std::thread campaign([&] {
    auto e = Election::Campaign(etcd_.get(), "/sluice/c/master", "b:7000", 2s, 100ms, [&] {
      b_asked.fetch_add(1);
      return false;
    });
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    b = std::move(*e);
    b_leads = true;
  });
  EXPECT_TRUE(internal::Eventually([&] { return b_asked.load() >= 3; }, 10s));
  EXPECT_FALSE(b_leads) << "a leads";
  EXPECT_EQ(Value("/sluice/c/master"), "a:7000");
  a->reset();  // a resigns (or dies: then its lease expires within 2 s).
  EXPECT_TRUE(internal::Eventually([&] { return b_leads.load(); }, 3s));
  campaign.join();
  EXPECT_EQ(Value("/sluice/c/master"), "b:7000");
  EXPECT_TRUE(b->leading());
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(300ms);
    stop = true;
  });
  auto c = Election::Campaign(etcd_.get(), "/sluice/c/master", "c:7000", 2s, 100ms,
                              [&] { return stop.load(); });
  stopper.join();
  EXPECT_EQ(c.status().code(), StatusCode::kCancelled);
}

TEST_F(EtcdTest, ALeaderWhoseLeaseIsLostIsToldSo) {
  // `told` outlives the election: its thread may call OnLost's callback until it is joined.
  std::atomic<int> told{0};
  auto a = Election::Campaign(etcd_.get(), "/sluice/c/orchestrator", "a", 3s, 100ms,
                              [] { return false; });
  ASSERT_TRUE(a.ok());
  (*a)->OnLost([&] { ++told; });
  ASSERT_TRUE(etcd_->Revoke((*etcd_->Get("/sluice/c/orchestrator"))->lease).ok());
  // leading() turns false just before the callback runs; wait for the callback itself.
  EXPECT_TRUE(internal::Eventually([&] { return told.load() == 1; }, 3s));
  EXPECT_FALSE((*a)->leading());
  a->reset();
  EXPECT_EQ(told.load(), 1);
}

TEST_F(EtcdTest, ResolveWaitsForTheKey) {
  std::thread later([&] {
    std::this_thread::sleep_for(300ms);
    (void)etcd_->Put("/sluice/c/master", "10.0.0.1:7000");
  });
  auto r = Resolve(etcd_.get(), "/sluice/c/master", 5s, 50ms);
  later.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "10.0.0.1:7000");
  auto none = Resolve(etcd_.get(), "/sluice/c/none", 200ms, 50ms);
  EXPECT_EQ(none.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(none.status().message().find("/sluice/c/none"), std::string_view::npos);
}

// etcd serving TLS that requires client certificates: a client with the
// CA and a certificate it signed is served; one without a certificate,
// one trusting another CA and one speaking plaintext are not; TLS settings
// that cannot work are refused before any call.
class EtcdTlsTest : public testing::TlsEtcdTest {
 protected:
  EtcdSecurity Mutual() const { return As(); }
  Status PutWith(const std::string& url, const EtcdSecurity& s) {
    auto c = EtcdClient::Create({url}, 2000ms, s);
    return c.ok() ? (*c)->Put("/tls/k", "v") : c.status();
  }
};

TEST_F(EtcdTlsTest, AClientNeedsTheCaAndACertificateItSigned) {
  const std::string url = server_->url();
  ASSERT_EQ(url.rfind("https://", 0), 0u) << url;
  auto good = EtcdClient::Create({url}, 2000ms, Mutual());
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ASSERT_TRUE((*good)->Put("/tls/k", "over tls").ok());
  auto kv = (*good)->Get("/tls/k");
  ASSERT_TRUE(kv.ok() && kv->has_value());
  EXPECT_EQ((*kv)->value, "over tls");

  EXPECT_EQ(PutWith(url, {pki_.ca, "", "", "", ""}).code(), StatusCode::kUnavailable)
      << "no client certificate";
  const Status other = PutWith(url, {pki_.other_ca, pki_.cert, pki_.key, "", ""});
  EXPECT_EQ(other.code(), StatusCode::kUnavailable);
  EXPECT_NE(other.message().find("not signed by --etcd-ca"), std::string_view::npos)
      << other.ToString();
  const std::string plain = "http://" + url.substr(8);
  EXPECT_FALSE(PutWith(plain, {}).ok()) << "plaintext to the TLS port";

  // Settings that cannot work are refused at once, naming the fix.
  EXPECT_NE(PutWith(url, {}).message().find("--etcd-ca"), std::string_view::npos);
  EXPECT_NE(PutWith(plain, Mutual()).message().find("plaintext"), std::string_view::npos);
  EXPECT_NE(PutWith(url, {pki_.ca, pki_.cert, "", "", ""}).message().find("--etcd-key"),
            std::string_view::npos);
  ASSERT_EQ(::chmod(pki_.key.c_str(), 0644), 0);
  EXPECT_EQ(PutWith(url, Mutual()).code(), StatusCode::kInvalidArgument)
      << "a client key others can read";
}

// Posts `body` to a plaintext etcd's gateway; whether it answered 200.
bool Admin(httplib::Client& http, const std::string& path, const nlohmann::json& body) {
  auto r = http.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << path << ": " << (r ? r->body : "no answer");
  return r && r->status == 200;
}

// etcd with auth on: a client with a user and password gets a token (the
// password crosses the wire once per token), fetches a new one when the
// token expires, and without a user or with a wrong password is refused.
TEST(EtcdAuthTest, AUserAuthenticatesAndAgainWhenItsTokenExpires) {
  if (!EtcdServer::Available()) {
    GTEST_SKIP() << "no /usr/bin/etcd (Debian's etcd-server)";
  }
  EtcdServer server({}, {}, /*auth_token_ttl_s=*/1);
  httplib::Client http(server.url());
  const std::string all = "AA==";  // Base64 of "\0": every key.
  ASSERT_TRUE(Admin(http, "/v3/auth/user/add", {{"name", "root"}, {"password", "root-pw-5e1"}}));
  ASSERT_TRUE(Admin(http, "/v3/auth/role/add", {{"name", "root"}}));
  ASSERT_TRUE(Admin(http, "/v3/auth/user/grant", {{"user", "root"}, {"role", "root"}}));
  ASSERT_TRUE(Admin(http, "/v3/auth/user/add", {{"name", "sluice"}, {"password", "pw-7c2d9e"}}));
  ASSERT_TRUE(Admin(http, "/v3/auth/role/add", {{"name", "cluster"}}));
  ASSERT_TRUE(Admin(http, "/v3/auth/role/grant",
                    {{"name", "cluster"},
                     {"perm", {{"permType", "READWRITE"}, {"key", all}, {"range_end", all}}}}));
  ASSERT_TRUE(Admin(http, "/v3/auth/user/grant", {{"user", "sluice"}, {"role", "cluster"}}));
  ASSERT_TRUE(Admin(http, "/v3/auth/enable", nlohmann::json::object()));

  auto c = EtcdClient::Create({server.url()}, 2000ms, {"", "", "", "sluice", "pw-7c2d9e"});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Put("/auth/k", "v1").ok());
  EXPECT_EQ((*c)->authentications(), 1u);

  auto anon = EtcdClient::Create({server.url()}, 2000ms);
  EXPECT_FALSE((*anon)->Put("/auth/k", "v2").ok()) << "no user";
  auto wrong = EtcdClient::Create({server.url()}, 2000ms, {"", "", "", "sluice", "wrong"});
  const Status refused = (*wrong)->Put("/auth/k", "v2");
  EXPECT_EQ(refused.code(), StatusCode::kUnauthenticated) << refused.ToString();

  // Idle past the token's lifetime (1 s): the next call fetches a new
  // token and succeeds. Bounded: five idle periods.
  for (int i = 0; i < 5 && (*c)->authentications() < 2; ++i) {
    std::this_thread::sleep_for(2500ms);
    const Status put = (*c)->Put("/auth/k", "v" + std::to_string(i + 3));
    ASSERT_TRUE(put.ok()) << put.ToString();
  }
  EXPECT_GE((*c)->authentications(), 2u) << "the expired token was never replaced";
  auto kv = (*c)->Get("/auth/k");
  ASSERT_TRUE(kv.ok() && kv->has_value());
  EXPECT_NE((*kv)->value, "v1");
}

}  // namespace
}  // namespace sluice::discovery
