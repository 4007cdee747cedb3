// What the web console reads from the orchestrator, in process: its files
// (as built into the binary, byte for byte, with their policy headers), the
// job list of every kind, and the cluster's pools and counters, now and as
// a live event stream. The console itself runs in a browser in
// tests/browser (label browser).
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <gtest/gtest.h>

#include "common/testing/eventually.h"
#include "http/raw_client.h"
#include "orchestrator_fixture.h"

namespace sluice::testing {
namespace {

using http::raw::Conn;

std::string SourceFile(const std::string& path) {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/" + path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The `data:` of each event of `type` in an event stream's text.
std::vector<json> EventData(const std::string& text, const std::string& type) {
  std::vector<json> out;
  const std::string marker = "event: " + type + "\ndata: ";
  for (std::size_t at = text.find(marker); at != std::string::npos;
       at = text.find(marker, at + 1)) {
    const std::size_t from = at + marker.size();
    out.push_back(json::parse(text.substr(from, text.find('\n', from) - from), nullptr, false));
  }
  return out;
}

using ConsoleHttpTest = OrchestratorTest;

TEST_F(ConsoleHttpTest, TheConsolesFilesAreServedAsBuiltWithTheirTypesAndPolicy) {
  configure_ = [](OrchestratorConfig& c) { c.access.keys = {{"sk-console-0123456789", "ops"}}; };
  Start();
  // The page needs no key (it holds no data); the API behind it does.
  for (const char* path : {"/console", "/console/"}) {
    auto r = http_->Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
    EXPECT_EQ(r->body, SourceFile("src/orchestrator/console/web/index.html")) << path;
    EXPECT_NE(r->get_header_value("Content-Security-Policy").find("script-src 'self';"),
              std::string::npos);
    EXPECT_EQ(r->get_header_value("X-Content-Type-Options"), "nosniff");
  }
  const std::pair<const char*, const char*> files[] = {
      {"console.js", "text/javascript; charset=utf-8"}, {"console.css", "text/css; charset=utf-8"}};
  for (const auto& [name, type] : files) {
    auto r = http_->Get(std::string("/console/") + name);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << name;
    EXPECT_EQ(r->get_header_value("Content-Type"), type);
    const std::string source = SourceFile(std::string("src/orchestrator/console/web/") + name);
    ASSERT_GT(source.size(), 1000u) << name;
    EXPECT_EQ(r->body, source) << name;
  }
  for (const char* path : {"/console/nope.js", "/console/../http_api.cc", "/console/a/b"}) {
    auto r = http_->Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
  }
  EXPECT_EQ(http_->Get("/v1/cluster")->status, 401);
  EXPECT_EQ(http_->Get("/v1/cluster/events")->status, 401);
  EXPECT_EQ(http_->Get("/v1/jobs")->status, 401);
  const httplib::Headers key = {{"Authorization", "Bearer sk-console-0123456789"}};
  EXPECT_EQ(http_->Get("/v1/cluster", key)->status, 200);
}

TEST_F(ConsoleHttpTest, TheClusterShowsEachPoolAndStreamsOnlyItsChanges) {
  Start();
  FakeWorker e(server_->endpoint(), "encode"), d(server_->endpoint(), "denoise"),
      v(server_->endpoint(), "decode");
  json c;
  ASSERT_TRUE(internal::Eventually(
      [&] {
        c = json::parse(http_->Get("/v1/cluster")->body, nullptr, false);
        return c.is_object() && c["models"].size() == 1 && c["models"][0]["stages"].size() == 3 &&
               c["models"][0]["stages"][2]["workers"] == 1;
      },
      10s))
      << c.dump();
  EXPECT_EQ(c["object"], "cluster");
  const json& stages = c["models"][0]["stages"];
  EXPECT_EQ(stages[0]["stage"], "encode");
  EXPECT_EQ(stages[1]["stage"], "denoise");
  EXPECT_EQ(stages[1]["kind"], "admission");
  for (const json& s : stages) {
    EXPECT_EQ(s["workers"], 1) << s.dump();
    EXPECT_GE(s["slots"].get<int>(), 1) << s.dump();
    EXPECT_EQ(s["busy"].get<int>() + s["credits"].get<int>(), s["slots"].get<int>()) << s.dump();
    EXPECT_EQ(s["queued_by_class"].size(), 3u) << s.dump();
  }
  EXPECT_EQ(c["jobs"]["submitted"], 0);
  EXPECT_TRUE(c["store"].is_null()) << c.dump();  // No store master.

  Conn feed(server_->http_endpoint());
  ASSERT_TRUE(feed.Send("GET /v1/cluster/events HTTP/1.1\r\nHost: t\r\n\r\n"));
  std::string seen = feed.ReadUntil("event: cluster\n");
  ASSERT_NE(seen, "");
  EXPECT_NE(seen.find("text/event-stream"), std::string::npos);
  int status = 0;
  const std::string id = Post(R"({"prompt":"a heron","async":true})", &status)["id"];
  ASSERT_EQ(status, 202);
  // The stream follows the job to its end (a view each second at most,
  // and only one that differs from the last).
  const std::string rest = feed.ReadUntil("\"succeeded\":1");
  ASSERT_NE(rest, "") << seen;
  seen += rest + feed.ReadUntil("\n\n");
  const std::vector<json> views = EventData(seen, "cluster");
  ASSERT_GE(views.size(), 2u) << seen;
  for (std::size_t i = 1; i < views.size(); ++i) {
    EXPECT_NE(views[i], views[i - 1]) << "a view sent twice: " << views[i].dump();
  }
  EXPECT_EQ(views.front()["jobs"]["submitted"], 0);
  EXPECT_EQ(views.back()["jobs"]["submitted"], 1);
  EXPECT_EQ(views.back()["jobs"]["succeeded"], 1);

  // The job's timeline names the worker each stage started on.
  Conn events(server_->http_endpoint());
  ASSERT_TRUE(events.Send("GET /v1/jobs/" + id + "/events HTTP/1.1\r\nHost: t\r\n\r\n"));
  const std::string timeline = events.ReadUntil("event: end\n");
  const std::vector<json> started = EventData(timeline, "stage_started");
  EXPECT_EQ(started.size(), 3u) << timeline;
  for (const json& ev : started) {
    EXPECT_TRUE(ev.contains("worker") && ev["worker"].is_string() && ev["worker"] != "0")
        << ev.dump();
  }
}

TEST_F(ConsoleHttpTest, TheClusterShowsWhatTheStoreHoldsAsItsMasterLastAnswered) {
  MasterConfig mc;
  mc.heartbeat_interval = 100ms;
  mc.reservation_ttl = 0ms;  // Used bytes are the objects' alone.
  mc.cache_budgets = {{"condition", 0.25}};
  InProcessStore st;
  ASSERT_EQ(st.Start(mc), "");
  store_master_ = st.master->endpoint();
  Start();
  ASSERT_TRUE(st.client->Put("job/1/encode", std::vector<std::byte>(65536, std::byte{1})).ok());
  PutOptions cached;
  cached.policy.cache_class = "condition";
  ASSERT_TRUE(
      st.client->Put("cond/heron", std::vector<std::byte>(4096, std::byte{2}), cached).ok());
  json store;
  ASSERT_TRUE(internal::Eventually(
      [&] {
        store = json::parse(http_->Get("/v1/cluster")->body)["store"];
        return store.is_object() && store["objects"] == 2;
      },
      10s))
      << store.dump();
  EXPECT_EQ(store["answered"], true);
  EXPECT_EQ(store["nodes"], 1);
  EXPECT_EQ(store["memory"]["capacity_bytes"], 16 << 20);
  EXPECT_GE(store["memory"]["used_bytes"].get<std::uint64_t>(), 65536u + 4096u);
  EXPECT_EQ(store["disk"]["capacity_bytes"], 0);
  const json& condition = store["cache_classes"]["condition"];
  EXPECT_EQ(condition["objects"], 1) << store.dump();
  EXPECT_EQ(condition["bytes"], 4096) << store.dump();
  EXPECT_EQ(condition["budget_bytes"], 4 << 20) << store.dump();

  // The master goes: the view keeps what it last said, marked old.
  st.client.reset();
  st.node.reset();
  st.master.reset();
  ASSERT_TRUE(internal::Eventually(
      [&] {
        store = json::parse(http_->Get("/v1/cluster")->body)["store"];
        return store["answered"] == false;
      },
      20s))
      << store.dump();
  EXPECT_EQ(store["objects"], 2);
}

TEST_F(ConsoleHttpTest, JobsListEveryKindNewestFirstAndOnlyTheCallersUnderKeys) {
  const std::string key_a = "sk-console-a-0123456789", key_b = "sk-console-b-0123456789";
  configure_ = [&](OrchestratorConfig& c) { c.access.keys = {{key_a, "a"}, {key_b, "b"}}; };
  Start();
  const httplib::Headers as_a = {{"Authorization", "Bearer " + key_a}};
  const httplib::Headers as_b = {{"Authorization", "Bearer " + key_b}};
  auto image = http_->Post("/v1/images/generations", as_a, R"({"prompt":"one","async":true})",
                           "application/json");
  ASSERT_EQ(image->status, 202) << image->body;
  auto video = http_->Post("/v1/videos", as_a, R"({"prompt":"two"})", "application/json");
  ASSERT_EQ(video->status, 200) << video->body;
  ASSERT_EQ(http_->Post("/v1/videos", as_b, R"({"prompt":"theirs"})", "application/json")->status,
            200);
  const std::string image_id = json::parse(image->body)["id"];
  const std::string video_id = json::parse(video->body)["id"];

  const json all = json::parse(http_->Get("/v1/jobs", as_a)->body);
  ASSERT_EQ(all["data"].size(), 2u) << all.dump();
  EXPECT_EQ(all["data"][0]["id"], video_id);  // Newest first.
  EXPECT_EQ(all["data"][0]["kind"], "video");
  EXPECT_EQ(all["data"][1]["id"], image_id);
  EXPECT_EQ(all["data"][1]["kind"], "image");
  EXPECT_EQ(all["data"][1]["object"], "job");
  EXPECT_GT(all["data"][1]["created_at"].get<std::int64_t>(), 0);
  EXPECT_EQ(all["data"][1]["progress"]["fraction"], 0.0);
  EXPECT_EQ(all["has_more"], false);
  const json first = json::parse(http_->Get("/v1/jobs?limit=1&order=asc", as_a)->body);
  ASSERT_EQ(first["data"].size(), 1u);
  EXPECT_EQ(first["data"][0]["id"], image_id);
  EXPECT_EQ(first["has_more"], true);
  const json next =
      json::parse(http_->Get("/v1/jobs?limit=1&order=asc&after=" + image_id, as_a)->body);
  ASSERT_EQ(next["data"].size(), 1u);
  EXPECT_EQ(next["data"][0]["id"], video_id);
  // The other tenant sees its own job only, and not a's as a cursor.
  const json theirs = json::parse(http_->Get("/v1/jobs", as_b)->body);
  ASSERT_EQ(theirs["data"].size(), 1u);
  EXPECT_NE(theirs["data"][0]["id"], video_id);
  for (const auto& [query, param] :
       std::vector<std::pair<std::string, std::string>>{{"limit=0", "limit"},
                                                        {"limit=101", "limit"},
                                                        {"limit=x", "limit"},
                                                        {"order=up", "order"},
                                                        {"after=job-nope", "after"},
                                                        {"after=" + image_id, "after"}}) {
    auto r = http_->Get("/v1/jobs?" + query, as_b);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << query;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], param) << query;
  }
  // /v1/videos lists videos only, and refuses an image as its cursor.
  const json videos = json::parse(http_->Get("/v1/videos", as_a)->body);
  ASSERT_EQ(videos["data"].size(), 1u);
  EXPECT_EQ(videos["data"][0]["id"], video_id);
  EXPECT_EQ(http_->Get("/v1/videos?after=" + image_id, as_a)->status, 400);
}

}  // namespace
}  // namespace sluice::testing
