// In-place reads of store objects (StoreClient::GetInPlace) across
// processes: the client maps a same-host node's memory under a read lease.
#include <cstring>
#include <thread>

#include "store_fixture.h"

namespace sluice::testing {
namespace {

TEST_F(StoreTest, GetInPlaceMapsASameHostNodeUnderAReadLease) {
  std::vector<std::byte> v(3 * kMiB + 5);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<std::byte>(i * 13 + 1);
  }
  PutOptions o;
  o.policy = LeasePolicy::DeleteOnConsume(1);
  ASSERT_TRUE(client_->Put("in-place", v, o).ok());
  Result<ObjectView> view = client_->GetInPlace("in-place");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  ASSERT_EQ(view->size(), v.size());
  EXPECT_EQ(std::memcmp(view->data(), v.data(), v.size()), 0);
  EXPECT_TRUE(*client_->Exists("in-place")) << "the view's read is not complete yet";
  EXPECT_TRUE(view->End().ok());
  EXPECT_TRUE(view->End().ok()) << "End is idempotent";
  EXPECT_TRUE(EventuallyGone(*client_, "in-place")) << "ending the view consumed the payload";

  EXPECT_EQ(client_->GetInPlace("never-put").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(client_->Put("tcp-only", v).ok());
  auto tcp_engine = MakeEngine({"tcp"});
  auto tcp_client = MakeClient(*tcp_engine);
  Result<ObjectView> far = tcp_client->GetInPlace("tcp-only");
  EXPECT_EQ(far.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(far.status().message().find("GetInto"), std::string_view::npos)
      << far.status().ToString();
  EXPECT_TRUE(tcp_client->Get("tcp-only").ok()) << "the refused view left no lease behind";
}

class ShortReadLeaseStoreTest : public StoreTest {
 protected:
  // Long enough that a view's first renewal comes well inside it even on a
  // loaded sanitizer run (at 300 ms, mapping the view under TSan once took
  // it all).
  std::vector<std::string> MasterExtraArgs() override {
    return {"--read-lease-timeout-ms", "1000"};
  }
};

TEST_F(ShortReadLeaseStoreTest, AViewHeldPastItsLeaseSaysSoWhenItEnds) {
  std::vector<std::byte> v(64 * 1024, std::byte{7});
  ASSERT_TRUE(client_->Put("held", v).ok());
  Result<ObjectView> view = client_->GetInPlace("held");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  std::this_thread::sleep_for(2500ms);  // Past the lease and the master's next sweep.
  Status s = view->End();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  Result<ObjectView> quick = client_->GetInPlace("held");
  ASSERT_TRUE(quick.ok()) << quick.status().ToString();
  EXPECT_TRUE(quick->End().ok()) << "a view ended in time is fine";
}
TEST_F(ShortReadLeaseStoreTest, ARenewedViewHoldsPastTheTimeout) {
  std::vector<std::byte> v(64 * 1024, std::byte{9});
  ASSERT_TRUE(client_->Put("renewed", v).ok());
  Result<ObjectView> view = client_->GetInPlace("renewed");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  // 3 s against a 1 s lease, renewed every 100 ms.
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(view->Renew().ok()) << i;
  }
  EXPECT_TRUE(view->End().ok());
  EXPECT_EQ(view->Renew().code(), StatusCode::kFailedPrecondition) << "the view has ended";
}

}  // namespace
}  // namespace sluice::testing
