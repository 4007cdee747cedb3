// The condition-embedding cache across processes: master, store node,
// orchestrator and reference workers each a `sluice` process. Encode workers
// share embeddings (a text encoded by one is a hit for a job on the other),
// a job whose prompt and negative prompt are both cached never reaches the
// encode pool and gives the same bytes, and the entries outlive the jobs
// that used them.
#include <httplib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "sluice/cache/condition.h"
#include "sluice/runtime/reference_stages.h"
#include "sluice/store/client.h"

#include "child_process.h"
#include "metrics_text.h"
#include "runtime/reference/pipeline.h"

namespace sluice::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class ConditionCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    master_ = Start({SLUICE_BIN, "master", "--listen", "127.0.0.1:0"});
    ASSERT_EQ(master_->Word(1), "master") << master_->banner();
    node_ = Start({SLUICE_BIN, "store-node", "--master", master_->Word(2), "--memory", "64MiB"});
    ASSERT_EQ(node_->Word(1), "store-node") << node_->banner();
    std::vector<std::string> argv = {SLUICE_BIN, "orchestrator", "--store-master",
                                     master_->Word(2)};
    for (std::string& f : OrchestratorFlags()) {
      argv.push_back(std::move(f));
    }
    orch_ = Start(argv);
    ASSERT_EQ(orch_->Word(1), "orchestrator") << orch_->banner();
    encode_.push_back(Worker("encode"));
    denoise_ = Worker("denoise");
    decode_ = Worker("decode");
  }

  // More flags of the orchestrator (a subclass's API keys).
  virtual std::vector<std::string> OrchestratorFlags() { return {}; }

  std::unique_ptr<ChildProcess> Start(std::vector<std::string> argv) {
    argv.push_back("--exit-on-stdin-eof");
    return std::make_unique<ChildProcess>(argv);
  }
  std::unique_ptr<ChildProcess> Worker(const std::string& stage,
                                       const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {SLUICE_BIN, "worker",         "--stage",
                                     stage,      "--orchestrator", orch_->Word(2),
                                     "--master", master_->Word(2)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto w = Start(argv);
    EXPECT_EQ(w->Word(1), "worker") << w->banner();
    return w;
  }

  static json Body(const std::string& prompt) {
    return {{"prompt", prompt}, {"negative_prompt", "blurry, low quality"},
            {"size", "64x64"},  {"steps", 2},
            {"seed", 11},       {"response_format", "url"}};
  }

  // Runs one image job; returns its id and PNG bytes.
  std::pair<std::string, std::string> Generate(const json& body) {
    httplib::Client http("http://" + orch_->Word(3));
    http.set_read_timeout(60, 0);
    if (!api_key_.empty()) {
      http.set_bearer_token_auth(api_key_);
    }
    auto r = http.Post("/v1/images/generations", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    if (!r || r->status != 200) {
      return {};
    }
    const std::string url = json::parse(r->body)["data"][0]["url"];
    const std::string path = url.substr(url.find("/v1/jobs/"));
    auto png = http.Get(path);
    EXPECT_TRUE(png && png->status == 200);
    const std::string id = path.substr(9, path.find("/content") - 9);
    return {id, png ? png->body : ""};
  }

  // The event types of job `id`, in order.
  std::vector<std::pair<std::string, std::string>> Events(const std::string& id) {
    httplib::Client http("http://" + orch_->Word(3));
    http.set_read_timeout(10, 0);
    if (!api_key_.empty()) {
      http.set_bearer_token_auth(api_key_);
    }
    auto r = http.Get("/v1/jobs/" + id + "/events");
    std::vector<std::pair<std::string, std::string>> out;
    if (!r) {
      return out;
    }
    std::size_t at = 0;
    while ((at = r->body.find("data: ", at)) != std::string::npos) {
      const std::size_t end = r->body.find('\n', at);
      const json e = json::parse(r->body.substr(at + 6, end - at - 6), nullptr, false);
      if (e.is_object()) {
        out.emplace_back(e.value("type", ""), e.value("stage", ""));
      }
      at = end;
    }
    return out;
  }

  // A client of the master alone (exists, remove).
  std::unique_ptr<StoreClient> MetadataClient() {
    StoreClientConfig sc;
    sc.master = master_->Word(2);
    auto store = StoreClient::CreateMetadataOnly(sc);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }
  // The condition keys of Body(prompt) (under `scope`, a tenant's):
  // prompt, then negative prompt.
  static std::vector<std::string> KeysOf(const std::string& prompt, const std::string& scope = "") {
    json body = Body(prompt);
    if (!scope.empty()) {
      body[std::string(cache::kCacheScopeField)] = scope;
    }
    Result<std::vector<std::string>> keys =
        cache::ConditionKeysFor(ReferenceConditionEncoder(), body.dump());
    EXPECT_TRUE(keys.ok()) << keys.status().ToString();
    return keys.ok() ? *keys : std::vector<std::string>{};
  }

  double CacheMetric(const std::string& field) {
    return MetricValue(orch_->Word(3), "sluice_cache_" + field + "_total{kind=\"condition\"}");
  }
  // Waits until the orchestrator's metric reaches `want` (heartbeats carry it).
  bool MetricReaches(const std::string& field, double want) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (CacheMetric(field) >= want) {
        return true;
      }
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  std::string api_key_;  // The HTTP calls' bearer key; empty: none.
  std::unique_ptr<ChildProcess> master_, node_, orch_, denoise_, decode_;
  std::vector<std::unique_ptr<ChildProcess>> encode_;
};

// Whether `events` hold one of `type` (for `stage`, unless empty).
bool Ran(const std::vector<std::pair<std::string, std::string>>& events, const std::string& type,
         const std::string& stage = "") {
  return std::any_of(events.begin(), events.end(), [&](const auto& e) {
    return e.first == type && (stage.empty() || e.second == stage);
  });
}

TEST_F(ConditionCacheTest, EncodeWorkersShareEmbeddingsAndACachedJobSkipsEncode) {
  // Job A on the first encode worker: both texts computed there.
  const auto [a, png_a] = Generate(Body("a lighthouse at dusk"));
  ASSERT_FALSE(png_a.empty());
  EXPECT_TRUE(Ran(Events(a), "stage_started", "encode"));
  ASSERT_TRUE(MetricReaches("computes", 2));

  // The entries outlive job A's cleanup.
  auto store = MetadataClient();
  for (const std::string& k : KeysOf("a lighthouse at dusk")) {
    EXPECT_TRUE(*store->Exists(k)) << k;
  }

  // Only a second encode worker left: job B's new prompt is computed
  // there, its negative prompt is the first worker's entry.
  encode_.push_back(Worker("encode"));
  encode_.front()->Kill();
  const auto [b, png_b] = Generate(Body("a harbour in fog"));
  ASSERT_FALSE(png_b.empty());
  EXPECT_TRUE(Ran(Events(b), "stage_started", "encode"));
  ASSERT_TRUE(MetricReaches("hits", 1)) << "the negative prompt was not a hit";
  EXPECT_EQ(CacheMetric("computes"), 3) << "the negative prompt was encoded again";

  // Job A again with no encode worker at all: every condition is cached,
  // so encode is skipped, and the bytes are job A's.
  encode_.back()->Kill();
  const auto [c, png_c] = Generate(Body("a lighthouse at dusk"));
  EXPECT_EQ(png_c, png_a);
  const auto events = Events(c);
  EXPECT_TRUE(Ran(events, "cache_hit")) << "no cache_hit event";
  EXPECT_FALSE(Ran(events, "stage_started", "encode")) << "encode ran for a cached job";
  EXPECT_EQ(MetricValue(orch_->Word(3), "sluice_orchestrator_cache_skips_total"), 1);
  // At submission: A missed both texts, B found its negative prompt, C both.
  auto field = [&](const std::string& what, const std::string& f) {
    return MetricValue(orch_->Word(3),
                       "sluice_orchestrator_condition_" + what + "_total{field=\"" + f + "\"}");
  };
  EXPECT_EQ(field("lookups", "prompt"), 3);
  EXPECT_EQ(field("hits", "prompt"), 1);
  EXPECT_EQ(field("lookups", "negative_prompt"), 3);
  EXPECT_EQ(field("hits", "negative_prompt"), 2);
}

// CFG branch sharing: a denoise worker sharing the negative prompt's
// cross-attention keys and values through the feature cache gives the same
// bytes as one that does not, and a second request with that negative
// prompt reuses the first one's keys.
TEST_F(ConditionCacheTest, CfgSharingGivesTheSameBytesAndReusesTheNegativeKeys) {
  const auto [a, plain] = Generate(Body("a red barn"));
  ASSERT_FALSE(plain.empty());
  denoise_.reset();
  denoise_ = Worker("denoise", {"--cfg-sharing"});
  const auto [b, shared] = Generate(Body("a red barn"));
  EXPECT_EQ(shared, plain) << "CFG sharing changed the bytes";
  const auto [c, other] = Generate(Body("a blue door"));
  ASSERT_FALSE(other.empty());
  auto r = reference::ParseRequest(Body("a blue door").dump(), 12, 4.0f);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(other, reference::GenerateAll(*r)->first);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  double hits = 0;
  while ((hits = MetricValue(orch_->Word(3), "sluice_cache_hits_total{kind=\"feature\"}")) < 1 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_GE(hits, 1) << "the second request did not reuse the negative prompt's keys";
  EXPECT_EQ(MetricValue(orch_->Word(3), "sluice_cache_computes_total{kind=\"feature\"}"), 1);
}

// An entry evicted between the orchestrator's lookup and denoise's read:
// denoise fails the stage with kNotFound, the orchestrator runs encode
// again (its cache computes the entry anew), and the job succeeds with the
// same bytes.
TEST_F(ConditionCacheTest, AnEntryGoneBeforeDenoiseReadsItRunsEncodeAgain) {
  const auto [a, png_a] = Generate(Body("a quiet orchard"));
  ASSERT_FALSE(png_a.empty());
  denoise_.reset();  // Unregisters: the next job waits for denoise.

  json body = Body("a quiet orchard");
  body["async"] = true;
  httplib::Client http("http://" + orch_->Word(3));
  http.set_read_timeout(30, 0);
  auto r = http.Post("/v1/images/generations", body.dump(), "application/json");
  ASSERT_TRUE(r && r->status / 100 == 2) << (r ? r->body : "no answer");
  const std::string b = json::parse(r->body)["id"];
  auto store = MetadataClient();
  for (const std::string& k : KeysOf("a quiet orchard")) {
    ASSERT_TRUE(store->Remove(k).ok()) << k;  // As if evicted.
  }
  denoise_ = Worker("denoise");
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  std::string status;
  while (status != "succeeded" && status != "failed" &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    auto j = http.Get("/v1/jobs/" + b);
    status = j ? json::parse(j->body, nullptr, false).value("status", "") : "";
  }
  ASSERT_EQ(status, "succeeded");
  auto png_b = http.Get("/v1/jobs/" + b + "/content");
  ASSERT_TRUE(png_b);
  EXPECT_EQ(png_b->body, png_a);
  const auto events = Events(b);
  EXPECT_TRUE(Ran(events, "cache_hit"));
  EXPECT_TRUE(Ran(events, "cache_evicted"));
  EXPECT_TRUE(Ran(events, "stage_started", "encode")) << "encode did not run again";
  EXPECT_EQ(MetricValue(orch_->Word(3), "sluice_orchestrator_cache_reruns_total"), 1);
}

// With API keys, each tenant's condition entries are its own: a prompt
// another tenant has asked for is no cache hit, so no tenant learns from a
// skipped encode (or its latency) what another asked.
class TenantConditionCacheTest : public ConditionCacheTest {
 protected:
  static constexpr const char* kKeyA = "key-of-tenant-a-3f9c2e81";
  static constexpr const char* kKeyB = "key-of-tenant-b-7d41a0c6";

  std::vector<std::string> OrchestratorFlags() override {
    char dir[] = "/tmp/sluice-tenants-XXXXXX";
    EXPECT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    const std::string path = dir_ + "/api-keys.yaml";
    std::ofstream(path) << "keys:\n  " << kKeyA << ": tenant-a\n  " << kKeyB << ": tenant-b\n";
    EXPECT_EQ(::chmod(path.c_str(), 0600), 0);
    return {"--api-keys", path};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
};

TEST_F(TenantConditionCacheTest, ATenantFindsOnlyItsOwnEntries) {
  api_key_ = kKeyA;
  const auto [a1, png_a] = Generate(Body("a lighthouse at dusk"));
  ASSERT_FALSE(png_a.empty());
  auto store = MetadataClient();
  for (const std::string& k : KeysOf("a lighthouse at dusk", "tenant-a")) {
    EXPECT_TRUE(*store->Exists(k)) << "tenant-a's entry " << k;
  }
  for (const std::string& k : KeysOf("a lighthouse at dusk")) {
    EXPECT_FALSE(*store->Exists(k)) << "an unscoped entry " << k;
  }
  const auto [a2, again] = Generate(Body("a lighthouse at dusk"));
  EXPECT_TRUE(Ran(Events(a2), "cache_hit")) << "the tenant's own entries are hits";

  // The same prompt from tenant B: encoded anew, the same bytes.
  api_key_ = kKeyB;
  const auto [b, png_b] = Generate(Body("a lighthouse at dusk"));
  EXPECT_EQ(png_b, png_a);
  const auto events = Events(b);
  EXPECT_FALSE(Ran(events, "cache_hit")) << "tenant-b hit tenant-a's entries";
  EXPECT_TRUE(Ran(events, "stage_started", "encode"));
  for (const std::string& k : KeysOf("a lighthouse at dusk", "tenant-b")) {
    EXPECT_TRUE(*store->Exists(k)) << "tenant-b's entry " << k;
  }
}

}  // namespace
}  // namespace sluice::testing
