// The cache layer over a real store (master and two nodes as processes):
// single-flight GetOrCompute across clients, takeover after a claimant's
// claim expires, a failed compute releasing its claim at once, entries
// that many readers read, and the option checks.
#include "sluice/cache/cache.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/cache/keys.h"

#include "store_fixture.h"

namespace sluice::testing {
namespace {

using cache::Cache;
using cache::CacheOptions;

std::vector<std::byte> Bytes(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

class CacheTest : public StoreTest {
 protected:
  std::unique_ptr<Cache> MakeCache(StoreClient& store, CacheOptions o = {}) {
    auto c = Cache::Create(&store, std::move(o));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(*c);
  }
  // A compute returning `value` that counts its calls in `*calls`.
  static Cache::Compute Counting(int* calls, std::string value) {
    return [calls, value = std::move(value)] {
      ++*calls;
      return Result<std::vector<std::byte>>(Bytes(value));
    };
  }
  static std::string KeyFor(std::string_view text) {
    return *cache::ConditionKey("test-encoder", "1", text);
  }
};

// Six callers on three clients (each its own engine, as separate workers
// would be) miss one key at once: one computes, the rest get its value.
TEST_F(CacheTest, ConcurrentMissesComputeOnce) {
  constexpr int kClients = 3, kPerClient = 2;
  std::vector<std::unique_ptr<TransferEngine>> engines;
  std::vector<std::unique_ptr<StoreClient>> clients;
  std::vector<std::unique_ptr<Cache>> caches;
  for (int i = 0; i < kClients; ++i) {
    engines.push_back(MakeEngine({"tcp", "shm"}));
    clients.push_back(MakeClient(*engines.back()));
    caches.push_back(MakeCache(*clients.back()));
  }
  const std::string key = KeyFor("a hot negative prompt");
  std::atomic<int> computed{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients * kPerClient; ++t) {
    threads.emplace_back([&, t] {
      Result<std::vector<std::byte>> v = caches[t % kClients]->GetOrCompute(key, [&] {
        computed.fetch_add(1);
        std::this_thread::sleep_for(300ms);  // Long enough for all to miss.
        return Result<std::vector<std::byte>>(Bytes("embedding"));
      });
      if (!v.ok() || *v != Bytes("embedding")) {
        wrong.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(computed.load(), 1);
  EXPECT_EQ(wrong.load(), 0);
  std::uint64_t waits = 0, computes = 0, misses = 0;
  for (const auto& c : caches) {
    waits += c->stats().single_flight_waits;
    computes += c->stats().computes;
    misses += c->stats().misses;
  }
  EXPECT_EQ(computes, 1u);
  EXPECT_EQ(misses, static_cast<std::uint64_t>(kClients * kPerClient));
  EXPECT_EQ(waits, static_cast<std::uint64_t>(kClients * kPerClient - 1));
  // The claim is gone; the entry stays for every later reader.
  EXPECT_TRUE(EventuallyGone(*client_, cache::ClaimKey(key)));
  for (int i = 0; i < 3; ++i) {
    Result<std::optional<std::vector<std::byte>>> hit = caches[0]->Lookup(key);
    ASSERT_TRUE(hit.ok() && hit->has_value());
  }
  EXPECT_EQ(caches[0]->stats().hits, 3u);
}

// A claimant that died mid-compute leaves its claim (what a killed process
// leaves in the store): a waiter takes over once the claim's ttl ends.
TEST_F(CacheTest, AClaimantThatDiedIsTakenOverWhenItsClaimExpires) {
  const std::string key = KeyFor("the claimant died");
  PutOptions dead;
  dead.policy = LeasePolicy::Ttl(800ms);
  // The claim's ttl runs from its put: time from there (a slow build, e.g.
  // under ThreadSanitizer, spends part of it making the cache).
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(client_->Put(cache::ClaimKey(key), Bytes("x"), dead).ok());
  auto c = MakeCache(*client_);
  Result<std::vector<std::byte>> v =
      c->GetOrCompute(key, [] { return Result<std::vector<std::byte>>(Bytes("late")); });
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, Bytes("late"));
  EXPECT_GE(took, 700ms) << "computed while another's claim held";
  EXPECT_LT(took, 10s);
  EXPECT_EQ(c->stats().takeovers, 1u);
  EXPECT_EQ(c->stats().computes, 1u);
}

// A compute that fails releases its claim: a waiter computes at once, not
// after the claim's ttl; the failure reaches its own caller.
TEST_F(CacheTest, AFailedComputeReleasesItsClaimAtOnce) {
  const std::string key = KeyFor("the first compute fails");
  CacheOptions o;
  o.claim_ttl = 30s;
  auto a = MakeCache(*client_, o);
  auto b = MakeCache(*client_, o);
  std::atomic<bool> a_computing{false};
  std::thread first([&] {
    Result<std::vector<std::byte>> v = a->GetOrCompute(key, [&] {
      a_computing = true;
      std::this_thread::sleep_for(300ms);
      return Result<std::vector<std::byte>>(InvalidArgumentError("the encoder refused"));
    });
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
  });
  while (!a_computing) {
    std::this_thread::sleep_for(1ms);
  }
  const auto start = std::chrono::steady_clock::now();
  Result<std::vector<std::byte>> v =
      b->GetOrCompute(key, [] { return Result<std::vector<std::byte>>(Bytes("second")); });
  first.join();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, Bytes("second"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

// Cache entries are store objects like any other: a master restart loses
// none (the nodes re-register them) and they keep their cache class.
TEST_F(CacheTest, EntriesSurviveAMasterRestartWithTheirClass) {
  auto c = MakeCache(*client_);
  const std::string key = KeyFor("survives a restart");
  int computed = 0;
  const Cache::Compute compute = Counting(&computed, "embedding");
  ASSERT_TRUE(c->Ensure(key, compute).ok());
  // Nodes learn of commits as they happen (the master answers a held
  // heartbeat): once they acknowledged every change, a restart loses none.
  ASSERT_TRUE(NodesKnowEveryChange());
  master_->Kill();
  StartMaster(master_ep_);
  ASSERT_EQ(master_->Word(2), master_ep_) << master_->banner();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  bool back = false;
  while (!back && std::chrono::steady_clock::now() < deadline) {
    Result<bool> there = client_->Exists(key);
    back = there.ok() && *there;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(back) << "the entry did not come back with its node";
  Result<std::vector<std::byte>> v = c->GetOrCompute(key, compute);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, Bytes("embedding"));
  EXPECT_EQ(computed, 1) << "computed again after the restart";
  EXPECT_EQ(MetricValue(master_->Word(3), "sluice_store_cache_objects{class=\"condition\"}"), 1);
}

TEST_F(CacheTest, AWaiterGivesUpAfterItsWaitTimeout) {
  const std::string key = KeyFor("never computed");
  PutOptions held;
  held.policy = LeasePolicy::Ttl(60s);
  ASSERT_TRUE(client_->Put(cache::ClaimKey(key), Bytes("x"), held).ok());
  CacheOptions o;
  o.wait_timeout = 400ms;
  auto c = MakeCache(*client_, o);
  bool ran = false;
  Result<std::vector<std::byte>> v = c->GetOrCompute(key, [&] {
    ran = true;
    return Result<std::vector<std::byte>>(Bytes("x"));
  });
  EXPECT_EQ(v.status().code(), StatusCode::kDeadlineExceeded) << v.status().ToString();
  EXPECT_FALSE(ran);
}

TEST_F(CacheTest, EnsureStoresOnceWithoutReadingBackAndOptionsAreChecked) {
  auto c = MakeCache(*client_);
  const std::string key = KeyFor("ensured");
  int computed = 0;
  const Cache::Compute compute = Counting(&computed, "value");
  ASSERT_TRUE(c->Ensure(key, compute).ok());
  ASSERT_TRUE(c->Ensure(key, compute).ok());
  EXPECT_EQ(computed, 1);
  EXPECT_EQ(c->stats().hits, 1u);
  Result<std::vector<std::byte>> v = client_->Get(key);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, Bytes("value"));

  CacheOptions o;
  o.policy = LeasePolicy::DeleteOnConsume(1);
  EXPECT_EQ(Cache::Create(client_.get(), o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.claim_ttl = 0ms;
  EXPECT_EQ(Cache::Create(client_.get(), o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Cache::Create(nullptr, {}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::testing
