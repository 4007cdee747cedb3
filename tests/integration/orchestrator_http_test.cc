// The orchestrator's HTTP front in process: event streams (ids, resume,
// keep-alives, the end event), synchronous clients that leave, health and
// readiness, and the error shape of every refusal.
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include <gtest/gtest.h>

#include "common/testing/eventually.h"
#include "http/raw_client.h"
#include "orchestrator/service/http_api.h"
#include "orchestrator_fixture.h"

namespace sluice::testing {
namespace {

using http::raw::Conn;
using sluice::internal::Eventually;

std::string Get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n";
}
std::string PostImages(const std::string& body) {
  return "POST /v1/images/generations HTTP/1.1\r\nHost: t\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The `id:` values of an event stream's text, in order.
std::vector<int> EventIds(const std::string& text) {
  std::vector<int> ids;
  const std::regex id_line("(^|\n)id: ([0-9]+)\n");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), id_line);
       it != std::sregex_iterator(); ++it) {
    ids.push_back(std::stoi((*it)[2]));
  }
  return ids;
}

class OrchestratorHttpTest : public OrchestratorTest {
 protected:
  // Whether /metrics has the line `line` (a sync client that left never
  // learned its job's name).
  bool Metric(const std::string& line) {
    auto m = http_->Get("/metrics");
    return m && m->body.find("\n" + line + "\n") != std::string::npos;
  }
};

TEST_F(OrchestratorHttpTest, EventStreamsNumberEventsKeepAliveEndAndResumeFromLastEventId) {
  configure_ = [](OrchestratorConfig& c) { c.http.sse_keepalive = 100ms; };
  Start();
  int status = 0;
  const std::string id = Post(R"({"prompt":"a heron","async":true})", &status)["id"];
  ASSERT_EQ(status, 202);
  Conn c(server_->http_endpoint());
  ASSERT_TRUE(c.Send(Get("/v1/jobs/" + id + "/events")));
  std::string seen = c.ReadUntil("event: queued\n");
  ASSERT_NE(seen, "");
  EXPECT_NE(seen.find("text/event-stream"), std::string::npos);
  // Quiet (no workers): keep-alive comments.
  const std::string quiet = c.ReadUntil(": keep-alive\n\n");
  EXPECT_NE(quiet, "");
  FakeWorker e(server_->endpoint(), "encode"), d(server_->endpoint(), "denoise"),
      v(server_->endpoint(), "decode");
  std::string rest = c.ReadUntil("event: end\n");
  ASSERT_NE(rest, "");
  rest += c.ReadUntil("\n\n");
  ASSERT_NE(c.ReadUntil("\r\n0\r\n\r\n"), "");  // The stream's last chunk.
  seen += quiet + rest;
  const std::vector<int> ids = EventIds(seen);
  ASSERT_GE(ids.size(), 5u) << seen;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(ids[i], static_cast<int>(i)) << seen;
  }
  EXPECT_NE(seen.find("event: done"), std::string::npos);
  const std::string end = seen.substr(seen.find("event: end\ndata: ") + 17);
  EXPECT_EQ(json::parse(end.substr(0, end.find('\n')))["status"], "succeeded");
  // The stream ends with the job: the connection serves the next request.
  ASSERT_TRUE(c.Send(Get("/healthz")));
  EXPECT_EQ(c.Read().status, 200);

  // A client that reconnects with Last-Event-ID gets only what came after.
  Conn again(server_->http_endpoint());
  ASSERT_TRUE(again.Send(Get("/v1/jobs/" + id + "/events", "Last-Event-ID: 1\r\n")));
  const std::string resumed = again.ReadUntil("event: end\n");
  const std::vector<int> later = EventIds(resumed);
  ASSERT_EQ(later.size(), ids.size() - 2) << resumed;
  EXPECT_EQ(later.front(), 2);
  ASSERT_TRUE(again.Send(Get("/v1/jobs/" + id + "/events", "Last-Event-ID: two\r\n")));
  again.ReadUntil("\r\n0\r\n\r\n");  // The rest of the first stream.
  const http::raw::Reply bad = again.Read();
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(json::parse(bad.body)["error"]["param"], "Last-Event-ID");
}

TEST_F(OrchestratorHttpTest, ASynchronousClientThatLeavesHasItsJobCancelledAndItsPayloadsFreed) {
  MasterConfig mc;
  mc.heartbeat_interval = 100ms;
  mc.reservation_ttl = 0ms;  // No space held for a next put: used bytes go back to 0.
  InProcessStore st;
  ASSERT_EQ(st.Start(mc), "");
  store_master_ = st.master->endpoint();
  Start();
  // Encode stores its output; nothing runs denoise, so the job waits there.
  StoreClient* store = st.client.get();
  FakeWorker e(server_->endpoint(), "encode", false,
               [store](std::uint64_t job, const std::string&) {
                 const std::string key = "job/" + std::to_string(job) + "/encode";
                 std::vector<std::byte> bytes(65536, std::byte{7});
                 return store->Put(key, bytes).ok() ? std::vector<std::string>{key}
                                                    : std::vector<std::string>{};
               });
  auto client = std::make_unique<Conn>(server_->http_endpoint());
  ASSERT_TRUE(client->Send(PostImages(R"({"prompt":"left behind"})")));
  ASSERT_TRUE(Eventually([&] { return st.master->Metrics().used_bytes >= 65536; }, 10s));
  client.reset();  // The client gives up and disconnects.
  EXPECT_TRUE(
      Eventually([&] { return Metric("sluice_orchestrator_jobs_cancelled_total 1"); }, 10s));
  EXPECT_TRUE(Eventually([&] { return st.master->Metrics().used_bytes == 0; }, 10s))
      << st.master->Metrics().used_bytes << " bytes still used";
  http_.reset();
  server_.reset();
}

TEST_F(OrchestratorHttpTest, KeepAbandonedJobsLetsALeftJobRunOn) {
  configure_ = [](OrchestratorConfig& c) { c.http.keep_abandoned_jobs = true; };
  Start();
  auto client = std::make_unique<Conn>(server_->http_endpoint());
  ASSERT_TRUE(client->Send(PostImages(R"({"prompt":"kept"})")));
  ASSERT_TRUE(Eventually([&] { return Metric("sluice_orchestrator_jobs_submitted_total 1"); }));
  client.reset();
  std::this_thread::sleep_for(200ms);
  FakeWorker e(server_->endpoint(), "encode"), d(server_->endpoint(), "denoise"),
      v(server_->endpoint(), "decode");
  EXPECT_TRUE(
      Eventually([&] { return Metric("sluice_orchestrator_jobs_succeeded_total 1"); }, 10s));
  EXPECT_TRUE(Metric("sluice_orchestrator_jobs_cancelled_total 0"));
}

TEST_F(OrchestratorHttpTest, HealthReadinessAndTheErrorShapeOfRefusals) {
  Start();
  EXPECT_EQ(http_->Get("/healthz")->status, 200);
  EXPECT_EQ(http_->Get("/health")->status, 200);
  auto r = http_->Get("/readyz");
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "not_ready");
  EXPECT_NE(r->body.find("sluice-reference/encode, sluice-reference/denoise, "
                         "sluice-reference/decode"),
            std::string::npos)
      << r->body;
  EXPECT_EQ(http_->Get("/readyz?model=nope")->status, 404);
  {
    FakeWorker e(server_->endpoint(), "encode"), v(server_->endpoint(), "decode");
    ASSERT_TRUE(Eventually([&] {
      auto x = http_->Get("/readyz");
      return x && x->body.find("for sluice-reference/denoise\"") != std::string::npos;
    }));
    FakeWorker d(server_->endpoint(), "denoise");
    EXPECT_TRUE(Eventually([&] { return http_->Get("/readyz")->status == 200; }));
  }
  // Every refusal: {"error": {"message", "type", "param", "code"}}.
  for (const auto& [path, want] : std::vector<std::pair<std::string, int>>{
           {"/v1/nowhere", 404}, {"/v1/jobs/job-77", 404}, {"/v1/jobs/job-77/events", 404}}) {
    auto x = http_->Get(path);
    ASSERT_TRUE(x);
    EXPECT_EQ(x->status, want) << path;
    const json e = json::parse(x->body, nullptr, false)["error"];
    for (const char* field : {"message", "type", "param", "code"}) {
      EXPECT_TRUE(e.contains(field)) << path << " lacks " << field << ": " << x->body;
    }
  }
  auto m = http_->Put("/v1/images/generations", "{}", "application/json");
  EXPECT_EQ(m->status, 405);
  EXPECT_EQ(json::parse(m->body)["error"]["code"], "method_not_allowed");
}

TEST_F(OrchestratorHttpTest, WhatStagesWouldRefuseAndCostLimitsAre400AtSubmission) {
  configure_ = [](OrchestratorConfig& c) { c.limits.max_steps = 100; };
  Start();
  struct Case {
    const char* path;
    const char* body;
    const char* field;
  };
  for (const Case& c : {
           Case{"/v1/images/generations", R"({"prompt":"x","guidance":31})", "guidance"},
           Case{"/v1/images/generations", R"({"prompt":"x","steps":101})", "steps"},
           Case{"/v1/images/generations", R"({"prompt":"x","n":5})", "n"},
           // The request that used to be accepted: hours of denoise workers.
           Case{"/v1/images/generations", R"({"prompt":"x","size":"1024x1024","steps":1000,"n":4})",
                "steps"},
           Case{"/v1/images/generations", R"({"prompt":"x","seed":1.5})", "seed"},
           Case{"/v1/images/generations", R"({"prompt":"x","user":["a"]})", "user"},
           // 60 s at 60 fps: 3,601 frames, past the 1,024-frame limit.
           Case{"/v1/videos", R"({"prompt":"x","seconds":60,"fps":60})", "seconds"},
           Case{"/v1/videos", R"({"prompt":"x","size":"1920x1080","frames":129})", "size"},
           Case{"/v1/images/generations", R"({"prompt":"x","step_cache":{"threshold":2}})",
                "step_cache"},
           Case{"/v1/images/generations", R"({"prompt":"x","step_cache":0.2})", "step_cache"},
           Case{"/v1/videos", R"({"prompt":"x","step_cache":{"threshold":0.2,"every":2}})",
                "step_cache"},
       }) {
    auto r = http_->Post(c.path, c.body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << c.body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], c.field) << r->body;
  }
}

TEST_F(OrchestratorHttpTest, TenantsNeedKeysSeeOnlyTheirOwnJobsAndMeetTheirLimits) {
  const std::string key_a = "sk-tenant-a-0123456789", key_b = "sk-tenant-b-0123456789";
  configure_ = [&](OrchestratorConfig& c) {
    c.access.keys = {{key_a, "a"}, {key_b, "b"}};
    c.access.tenants["a"].max_jobs_in_flight = 3;
    c.access.tenants["b"].requests_per_second = 0.5;
    c.access.tenants["b"].burst = 2;
  };
  Start();
  const httplib::Headers as_a = {{"Authorization", "Bearer " + key_a}};
  const httplib::Headers as_b = {{"Authorization", "Bearer " + key_b}};
  const std::string body = R"({"prompt":"mine","async":true})";
  auto r = http_->Post("/v1/images/generations", body, "application/json");
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
  {
    // The key is checked from the head: a 16 MiB body announced without
    // one is refused at once, never read.
    Conn raw(server_->http_endpoint());
    ASSERT_TRUE(raw.Send(
        "POST /v1/images/generations HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Content-Length: 16000000\r\n\r\n"));
    const http::raw::Reply refused = raw.Read();
    EXPECT_EQ(refused.status, 401);
    EXPECT_TRUE(refused.closed);
  }
  r = http_->Post("/v1/images/generations", {{"Authorization", "Bearer sk-not-a-key-at-all"}}, body,
                  "application/json");
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(http_->Get("/healthz")->status, 200);  // Probes need no key.
  EXPECT_EQ(http_->Get("/metrics")->status, 200);
  EXPECT_EQ(http_->Get("/readyz")->status, 503);

  r = http_->Post("/v1/images/generations", as_a, body, "application/json");
  ASSERT_EQ(r->status, 202) << r->body;
  const std::string id = json::parse(r->body)["id"];
  EXPECT_EQ(id.size(), 4u + 32u) << id;
  EXPECT_EQ(http_->Get("/v1/jobs/" + id, as_a)->status, 200);
  EXPECT_EQ(http_->Get("/v1/jobs/" + id, as_b)->status, 404);  // Another tenant's.
  EXPECT_EQ(http_->Get("/v1/jobs/" + id + "/events", as_b)->status, 404);
  EXPECT_EQ(http_->Delete("/v1/jobs/" + id, as_b)->status, 404);
  EXPECT_EQ(http_->Get("/v1/jobs/" + id)->status, 401);

  // Tenant a floods: past 3 jobs in flight it gets 429 while b is admitted
  // at its own rate (a burst of 2, then 429 with when to retry).
  int a_ok = 1, a_limited = 0, b_ok = 0, b_limited = 0;
  std::string retry_after;
  for (int i = 0; i < 6; ++i) {
    auto ra = http_->Post("/v1/images/generations", as_a, body, "application/json");
    a_ok += ra->status == 202 ? 1 : 0;
    a_limited += ra->status == 429 ? 1 : 0;
    auto rb = http_->Post("/v1/videos", as_b, R"({"prompt":"theirs"})", "application/json");
    if (rb->status == 429) {
      ++b_limited;
      retry_after = rb->get_header_value("Retry-After");
    } else {
      b_ok += rb->status == 200 ? 1 : 0;
    }
  }
  EXPECT_EQ(a_ok, 3);
  EXPECT_EQ(a_limited, 4);
  EXPECT_EQ(b_ok, 2);
  EXPECT_EQ(b_limited, 4);
  EXPECT_EQ(retry_after, "2");
  // Each tenant lists only its own videos.
  const json b_list = json::parse(http_->Get("/v1/videos", as_b)->body);
  EXPECT_EQ(b_list["data"].size(), 2u) << b_list.dump();
  EXPECT_EQ(json::parse(http_->Get("/v1/videos", as_a)->body)["data"].size(), 0u);
}

TEST(AccessConfigTest, LoadsKeysAndLimitsAndRefusesWhatIsWrongNamingIt) {
  const std::string path = ::testing::TempDir() + "/sluice-keys-" + std::to_string(::getpid());
  auto write = [&](const std::string& text) {
    std::ofstream(path) << text;
    return AccessConfig::Load(path);
  };
  auto ok = write(
      "keys:\n  sk-aaaaaaaaaaaaaaaa: team-a\n  sk-bbbbbbbbbbbbbbbb: team-b\n"
      "tenants:\n  team-a: {requests_per_second: 5, max_jobs_in_flight: 10, queue_share: 0.5}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->keys.at("sk-bbbbbbbbbbbbbbbb"), "team-b");
  EXPECT_EQ(ok->tenants.at("team-a").max_jobs_in_flight, 10u);
  EXPECT_DOUBLE_EQ(ok->tenants.at("team-a").queue_share, 0.5);
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"keys:\n  short: team-a\n", "at least 16"},
           {"keys: {}\n", "non-empty"},
           {"keys:\n  sk-aaaaaaaaaaaaaaaa: a\ntenants:\n  a: {rps: 3}\n", "tenants.a.rps"},
           {"keys:\n  sk-aaaaaaaaaaaaaaaa: a\ntenants:\n  a: {queue_share: 2}\n", "(0, 1]"},
           {"kees: {}\n", "kees: unknown"},
           // Names that are not words used to throw out of the loader
           // (found by api_keys_fuzz): the orchestrator died at start.
           {"? [a, b]\n: 1\n", "plain words"},
           {"keys:\n  sk-aaaaaaaaaaaaaaaa: a\ntenants:\n  ? [x]\n  : {burst: 1}\n", "tenant names"},
           {"keys:\n  sk-aaaaaaaaaaaaaaaa: a\ntenants:\n  a: {? [x] : 1}\n", "limit names"},
           {"keys: [unclosed\n", path}}) {
    auto bad = write(text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find(why), std::string::npos) << bad.status().message();
  }
  std::remove(path.c_str());
}

// A keys file may hold keys only hashed under its salt: HMAC-SHA256, the
// golden value of `sluice api-key hash` (cli_api_key_hash).
TEST(AccessConfigTest, HashedKeysAreLoadedHashedAndNeedTheSalt) {
  const std::string path = ::testing::TempDir() + "/sluice-hkeys-" + std::to_string(::getpid());
  auto write = [&](const std::string& text) {
    std::ofstream(path) << text;
    return AccessConfig::Load(path);
  };
  const std::string digest = "df84cfd19cf42c5752eca12dc1aaf77013fffb133b49fb50100a99ea00bddc01";
  const std::string salt_hex = "00112233445566778899aabbccddeeff";
  EXPECT_EQ(HashedApiKey(
                std::string("\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff", 16),
                "sk-team-a-4f9c2e7d1b8a"),
            "hmac-sha256:" + digest);
  auto ok = write("salt: " + salt_hex + "\nkeys:\n  hmac-sha256:" + digest +
                  ": team-a\n  sk-bbbbbbbbbbbbbbbb: team-b\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->hashed_keys.at(digest), "team-a");
  EXPECT_EQ(ok->keys.at("sk-bbbbbbbbbbbbbbbb"), "team-b");
  EXPECT_EQ(ok->salt.size(), 16u);
  EXPECT_TRUE(ok->closed());
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"keys:\n  hmac-sha256:" + digest + ": a\n", "need the file's salt"},
           {"salt: 00ff\nkeys:\n  sk-aaaaaaaaaaaaaaaa: a\n", "salt: 16..64 bytes"},
           {"salt: " + salt_hex + "\nkeys:\n  hmac-sha256:abc: a\n", "64 lowercase hex"}}) {
    auto bad = write(text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find(why), std::string::npos) << bad.status().message();
  }
  std::remove(path.c_str());
}

// The orchestrator serves a tenant whose key it holds only hashed.
TEST_F(OrchestratorHttpTest, AKeyHeldOnlyHashedServesItsTenant) {
  const std::string salt = "0123456789abcdef";  // 16 bytes.
  const std::string key = "sk-hashed-tenant-0123456789";
  configure_ = [&](OrchestratorConfig& c) {
    c.access.salt = salt;
    c.access.hashed_keys[HashedApiKey(salt, key).substr(12)] = "h";
  };
  Start();
  const std::string body = R"({"prompt":"mine","async":true})";
  auto r = http_->Post("/v1/images/generations", {{"Authorization", "Bearer " + key}}, body,
                       "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202) << r->body;
  r = http_->Post("/v1/images/generations",
                  {{"Authorization", "Bearer " + HashedApiKey(salt, key)}}, body,
                  "application/json");
  EXPECT_EQ(r->status, 401) << "the hashed entry itself is no key";
}

TEST(GenerationRequestTest, SeedsAreSixtyFourBitsEndToEnd) {
  orchestrator::HttpOptions o;
  bool async = false;
  auto seed_of = [&](const char* body) {
    auto r = orchestrator::ParseGenerationRequest(body, "image", o, &async);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return json::parse(r->request_json)["seed"].get<std::uint64_t>();
  };
  EXPECT_EQ(seed_of(R"({"prompt":"x","seed":4294967296})"), 4294967296u);
  EXPECT_NE(seed_of(R"({"prompt":"x","seed":4294967296})"), seed_of(R"({"prompt":"x"})"));
  EXPECT_EQ(seed_of(R"({"prompt":"x","seed":18446744073709551615})"), UINT64_MAX);
  EXPECT_EQ(seed_of(R"({"prompt":"x","seed":-1})"), UINT64_MAX);  // The same 64 bits.
}

// step_cache goes to the stages as asked, on images and videos alike.
TEST(GenerationRequestTest, AStepCacheIsPassedToTheStages) {
  orchestrator::HttpOptions o;
  bool async = false;
  for (const char* kind : {"image", "video"}) {
    auto r = orchestrator::ParseGenerationRequest(
        R"({"prompt":"x","step_cache":{"threshold":0.25}})", kind, o, &async);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(json::parse(r->request_json)["step_cache"]["threshold"], 0.25) << kind;
  }
}

// A request's batch key names what a denoise batch shares: the latent's
// size, frames and steps; prompts, seeds and priorities do not enter it.
TEST(GenerationRequestTest, ABatchKeyNamesTheShapeAndSteps) {
  orchestrator::HttpOptions o;
  bool async = false;
  auto key = [&](const char* body, const char* kind = "image") {
    auto r = orchestrator::ParseGenerationRequest(body, kind, o, &async);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->batch_key : std::string();
  };
  EXPECT_EQ(key(R"({"prompt":"x","size":"256x256","steps":12})"), "size=256x256,frames=1,steps=12");
  EXPECT_EQ(key(R"({"prompt":"x","size":"256x256","steps":12})"),
            key(R"({"prompt":"y","size":"256x256","steps":12,"seed":3,"priority":"batch"})"));
  EXPECT_NE(key(R"({"prompt":"x","size":"256x256","steps":12})"),
            key(R"({"prompt":"x","size":"128x128","steps":12})"));
  EXPECT_NE(key(R"({"prompt":"x","size":"256x256","steps":12})"),
            key(R"({"prompt":"x","size":"256x256","steps":20})"));
  EXPECT_NE(key(R"({"prompt":"x","size":"256x256","frames":5})", "video"),
            key(R"({"prompt":"x","size":"256x256","frames":9})", "video"));
}

}  // namespace
}  // namespace sluice::testing
