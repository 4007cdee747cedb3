// etcd's auth set up for a cluster, against a real etcd serving TLS with
// client certificates as shipped: each sluice role's user touches only its
// keys (a worker cannot rewrite the orchestrator's leader key nor read the
// journal), leaders still campaign and write, a client without a user is
// refused, and the set-up runs again as root.
#include "discovery/etcd_auth.h"

#include <gtest/gtest.h>

#include "discovery/membership.h"
#include "discovery/testing/tls_etcd_test.h"

namespace sluice::discovery {
namespace {

using namespace std::chrono_literals;

class EtcdAuthSetUpTest : public testing::TlsEtcdTest {
 protected:
  std::unique_ptr<EtcdClient> Client(const std::string& role) {
    auto c =
        EtcdClient::Create({server_->url()}, 2000ms,
                           role.empty() ? As() : As(EtcdUserOf("c", role), "pw-" + role + "-5d3a"));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }
  static std::map<std::string, std::string> Passwords() {
    std::map<std::string, std::string> out;
    for (const char* r : kEtcdRoles) {
      out[r] = std::string("pw-") + r + "-5d3a";
    }
    return out;
  }
};

TEST_F(EtcdAuthSetUpTest, EachRolesUserTouchesOnlyItsKeys) {
  auto admin = Client("");
  ASSERT_TRUE(SetUpEtcdAuth(admin.get(), "c", "root-pw-81f0", Passwords()).ok());
  EXPECT_FALSE(admin->Put("/sluice/c/master/leader", "anyone").ok()) << "auth is on";

  // The leaders campaign and write their keys as their own users.
  auto master = Client("master");
  auto orchestrator = Client("orchestrator");
  // A campaign refused by etcd retries: bounded, it ends as kCancelled.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  const auto never = [deadline] { return std::chrono::steady_clock::now() > deadline; };
  auto lead_master =
      Election::Campaign(master.get(), LeaderKey("c", "master"), "", 5s, 50ms, never);
  ASSERT_TRUE(lead_master.ok()) << lead_master.status().ToString();
  ASSERT_TRUE((*lead_master)->Publish("10.0.0.1:7000").ok());
  auto lead_orch =
      Election::Campaign(orchestrator.get(), LeaderKey("c", "orchestrator"), "", 5s, 50ms, never);
  ASSERT_TRUE(lead_orch.ok()) << lead_orch.status().ToString();
  ASSERT_TRUE((*lead_orch)->Publish("10.0.0.2:7100 10.0.0.2:8000").ok());
  Result<bool> wrote = orchestrator->Txn(
      {{EtcdWrite::Kind::kPut, "/sluice/c/orchestrator/journal/j1", "a tenant's prompt"}},
      (*lead_orch)->key(), (*lead_orch)->lease());
  ASSERT_TRUE(wrote.ok() && *wrote) << wrote.status().ToString();
  auto master_seen = orchestrator->Get(LeaderKey("c", "master"));
  ASSERT_TRUE(master_seen.ok() && master_seen->has_value()) << master_seen.status().ToString();
  EXPECT_EQ((*master_seen)->value, "10.0.0.1:7000");

  // A worker resolves both leaders, and can change neither nor read the
  // journal.
  auto worker = Client("worker");
  auto orch_seen = worker->Get(LeaderKey("c", "orchestrator"));
  ASSERT_TRUE(orch_seen.ok() && orch_seen->has_value()) << orch_seen.status().ToString();
  EXPECT_EQ((*orch_seen)->value, "10.0.0.2:7100 10.0.0.2:8000");
  EXPECT_TRUE(worker->Get(LeaderKey("c", "master")).ok());
  EXPECT_EQ(worker->Put(LeaderKey("c", "orchestrator"), "6.6.6.6:7100 6.6.6.6:8000").code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(worker->Delete(LeaderKey("c", "master")).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(worker->GetPrefix("/sluice/c/orchestrator/journal/").status().code(),
            StatusCode::kPermissionDenied);
  // A store node resolves the master, and nothing of the orchestrator's.
  auto node = Client("node");
  EXPECT_TRUE(node->Get(LeaderKey("c", "master")).ok());
  EXPECT_EQ(node->Get(LeaderKey("c", "orchestrator")).status().code(),
            StatusCode::kPermissionDenied);
  // The master cannot touch the orchestrator's keys either.
  EXPECT_EQ(master->Get("/sluice/c/orchestrator/journal/j1").status().code(),
            StatusCode::kPermissionDenied);
  orch_seen = worker->Get(LeaderKey("c", "orchestrator"));
  ASSERT_TRUE(orch_seen.ok() && orch_seen->has_value());
  EXPECT_EQ((*orch_seen)->value, "10.0.0.2:7100 10.0.0.2:8000") << "the leader key stood";

  // Again, as root: passwords set anew, nothing else changes.
  auto root = EtcdClient::Create({server_->url()}, 2000ms, As("root", "root-pw-81f0"));
  ASSERT_TRUE(root.ok());
  std::map<std::string, std::string> again = Passwords();
  again["worker"] = "pw-worker-rotated";
  const Status rerun = SetUpEtcdAuth(root->get(), "c", "root-pw-81f0", again);
  ASSERT_TRUE(rerun.ok()) << rerun.ToString();
  auto old_worker = Client("worker");
  EXPECT_EQ(old_worker->Get(LeaderKey("c", "master")).status().code(), StatusCode::kUnauthenticated)
      << "the old password";
  auto rotated = EtcdClient::Create({server_->url()}, 2000ms,
                                    As(EtcdUserOf("c", "worker"), "pw-worker-rotated"));
  ASSERT_TRUE(rotated.ok());
  EXPECT_TRUE((*rotated)->Get(LeaderKey("c", "orchestrator")).ok());
}

TEST_F(EtcdAuthSetUpTest, BadArgumentsAreRefusedBeforeAnyCall) {
  auto admin = Client("");
  EXPECT_EQ(SetUpEtcdAuth(admin.get(), "c", "", Passwords()).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(SetUpEtcdAuth(admin.get(), "c", "root-pw", {{"admin", "pw"}})
                .message()
                .find("no sluice role \"admin\""),
            std::string_view::npos);
  EXPECT_EQ(SetUpEtcdAuth(admin.get(), "c", "root-pw", {{"worker", ""}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(admin->Put("/sluice/c/x", "auth is still off").ok());
}

}  // namespace
}  // namespace sluice::discovery
