// StoreClient::Warm across processes: before any request, a client opens
// its connections to the store nodes and maps the same-host ones.
#include <fstream>
#include <string>
#include <thread>

#include "store_fixture.h"

namespace sluice::testing {
namespace {

// Mappings of shared allocations (ours and peers') in this process.
int SharedMappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    n += line.find("/memfd:sluice-shared") != std::string::npos ? 1 : 0;
  }
  return n;
}

TEST_F(StoreTest, WarmMapsEverySameHostNodeBeforeTheFirstRequest) {
  auto engine = MakeEngine({"tcp", "shm"});
  auto client = MakeClient(*engine);
  const int before = SharedMappings();
  ASSERT_TRUE(client->Warm().ok());
  EXPECT_GE(SharedMappings(), before + 2) << "one segment of each of the two nodes is mapped";
  const int warm = SharedMappings();
  ASSERT_TRUE(client->Warm().ok());
  EXPECT_EQ(SharedMappings(), warm) << "Warm is idempotent";
  // Requests run as before, without mapping anything more.
  const std::vector<std::byte> v(kMiB, std::byte{3});
  ASSERT_TRUE(client->Put("warm/1", v).ok());
  Result<std::vector<std::byte>> got = client->Get("warm/1");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == v);
  EXPECT_EQ(SharedMappings(), warm);
}

TEST_F(StoreTest, WarmWithTheMasterGoneSaysSoAndTheClientStaysUsable) {
  auto engine = MakeEngine({"tcp", "shm"});
  StoreClientConfig c;
  c.master = master_ep_;
  c.rpc_timeout = std::chrono::milliseconds(500);
  auto client = StoreClient::Create(engine.get(), c);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  master_->Kill();
  const Status s = (*client)->Warm();
  EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded)
      << s.ToString();
  StartMaster(master_ep_);
  ASSERT_EQ(master_->Word(2), master_ep_) << master_->banner();
  const auto until = std::chrono::steady_clock::now() + 10s;
  Status again = (*client)->Warm();
  while (!again.ok() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);
    again = (*client)->Warm();
  }
  EXPECT_TRUE(again.ok()) << again.ToString();
}

}  // namespace
}  // namespace sluice::testing
