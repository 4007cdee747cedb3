// The etcd client, publishers and elections against a real etcd (label
// etcd; skipped where /usr/bin/etcd is absent).
#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "common/testing/eventually.h"
#include "discovery/etcd_client.h"
#include "discovery/membership.h"
#include "discovery/testing/etcd_server.h"

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

TEST(EtcdEndpointsTest, OnlyHttpHostPortUrlsAreAccepted) {
  auto two = ParseEtcdEndpoints("http://10.0.0.1:2379,http://[fd00::1]:2379");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u);
  for (const char* bad : {"", "10.0.0.1:2379", "https://h:2379", "http://h", "http://h:1,"}) {
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
    std::this_thread::sleep_for(3s);
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
  std::thread campaign([&] {
    auto e = Election::Campaign(etcd_.get(), "/sluice/c/master", "b:7000", 2s, 100ms, never);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    b = std::move(*e);
    b_leads = true;
  });
  std::this_thread::sleep_for(1s);
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

}  // namespace
}  // namespace sluice::discovery
