// Previews while denoising, end to end in the embedded deployment
// (reference stages, HTTP): a request with preview_every gets `preview`
// server-sent events carrying PNGs of the current prediction and
// GET /v1/jobs/{id}/preview; the last preview shows the picture the job
// returns; a cancelled job's previews stop; one tenant never sees
// another's; bad values are refused by name.
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/client/http_client.h"
#include "sluice/serve/embedded.h"

#include "base64.h"
#include "embedded_start.h"
#include "media/png.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

struct Event {
  std::string type;
  json data;
};

// Every event of job `id`'s stream up to its `end` (bounded by the
// client's read timeout).
std::vector<Event> Events(const std::string& url, const std::string& id,
                          const std::string& key = "") {
  httplib::Client http(url);
  http.set_read_timeout(60, 0);
  httplib::Headers h;
  if (!key.empty()) {
    h.emplace("Authorization", "Bearer " + key);
  }
  std::string body;
  auto res = http.Get("/v1/jobs/" + id + "/events", h, [&](const char* d, std::size_t n) {
    body.append(d, n);
    return true;
  });
  EXPECT_TRUE(res) << "no answer";
  std::vector<Event> out;
  std::size_t pos = 0;
  while ((pos = body.find("event: ", pos)) != std::string::npos) {
    const std::size_t eol = body.find('\n', pos);
    const std::size_t data = body.find("data: ", eol);
    const std::size_t end = body.find('\n', data);
    out.push_back({body.substr(pos + 7, eol - pos - 7),
                   json::parse(body.substr(data + 6, end - data - 6), nullptr, false)});
    pos = end;
  }
  return out;
}

client::GenerateRequest Image(int steps, std::optional<int> every) {
  client::GenerateRequest r;
  r.prompt = "a large red circle on the left on a blue background";
  r.size = "128x128";
  r.seed = 1;
  r.steps = steps;
  r.preview_every = every;
  return r;
}

// The mean absolute difference per channel of a 32×32 preview and the
// 128×128 result averaged over 4×4 blocks.
double PreviewError(const media::RgbImage& preview, const media::RgbImage& result) {
  double sum = 0;
  for (int y = 0; y < 32; ++y) {
    for (int x = 0; x < 32; ++x) {
      for (int c = 0; c < 3; ++c) {
        double mean = 0;
        for (int dy = 0; dy < 4; ++dy) {
          for (int dx = 0; dx < 4; ++dx) {
            mean += result.rgb[((4 * y + dy) * 128 + 4 * x + dx) * 3 + c] / 16.0;
          }
        }
        sum += std::abs(mean - preview.rgb[(y * 32 + x) * 3 + c]);
      }
    }
  }
  return sum / (32 * 32 * 3);
}

TEST(PreviewTest, PreviewsStreamAsEventsAndTheLastShowsTheResult) {
  auto cluster = StartEmbedded(EmbeddedConfig{});
  ASSERT_NE(cluster, nullptr);
  const std::string url = "http://" + cluster->http_endpoint();
  const auto at = std::chrono::steady_clock::now();
  auto id = client::Submit(url, Image(12, 1));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const std::vector<Event> events = Events(url, *id);
  int previews = 0, with_image = 0, last_step = 0;
  for (const Event& e : events) {
    if (e.type != "preview") {
      continue;
    }
    ++previews;
    EXPECT_GT(e.data["step"].get<int>(), last_step) << "preview steps go forward";
    last_step = e.data["step"].get<int>();
    EXPECT_EQ(e.data["steps"], 12);
    if (e.data.contains("image")) {
      ++with_image;
      auto png = media::DecodePng(Unbase64(e.data["image"].get<std::string>()));
      ASSERT_TRUE(png.ok()) << png.status().ToString();
      EXPECT_EQ(png->width, 32);
      EXPECT_EQ(png->height, 32);
    }
  }
  // At most one preview per heartbeat reaches the server; at least the
  // last step's does (sent with the progress before the job is done).
  EXPECT_GE(previews, 1);
  EXPECT_GE(with_image, 1);
  EXPECT_EQ(last_step, 12);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().type, "end");

  auto done = client::WaitAndFetch(url, *id, false, at, 60s);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->status, "succeeded");
  // Read again once finished: only the newest preview event keeps its
  // image (a job holds one preview however many it sent).
  with_image = 0;
  for (const Event& e : Events(url, *id)) {
    with_image += e.type == "preview" && e.data.contains("image");
  }
  EXPECT_EQ(with_image, 1);
  httplib::Client http(url);
  auto res = http.Get("/v1/jobs/" + *id + "/preview");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "image/png");
  EXPECT_EQ(res->get_header_value("X-Preview-Step"), "12");
  auto preview = media::DecodePng(res->body);
  auto result = media::DecodePng(done->content);
  ASSERT_TRUE(preview.ok() && result.ok());
  // The last step's prediction is the final latent; the shipped linear
  // map shows it within a few levels of the decoded picture (measured ~6).
  EXPECT_LT(PreviewError(*preview, *result), 20.0);

  // A job that asked for none has none.
  auto plain = client::Submit(url, Image(2, std::nullopt));
  ASSERT_TRUE(plain.ok());
  for (const Event& e : Events(url, *plain)) {
    EXPECT_NE(e.type, "preview");
  }
  res = http.Get("/v1/jobs/" + *plain + "/preview");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_NE(res->body.find("no_preview"), std::string::npos) << res->body;
}

TEST(PreviewTest, BadValuesAreRefusedByName) {
  auto cluster = StartEmbedded(EmbeddedConfig{});
  ASSERT_NE(cluster, nullptr);
  httplib::Client http("http://" + cluster->http_endpoint());
  for (const char* v : {"-1", "\"2\"", "1.5", "100000"}) {
    auto res =
        http.Post("/v1/images/generations",
                  std::string(R"({"prompt":"a","preview_every":)") + v + "}", "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << v;
    EXPECT_NE(res->body.find("preview_every"), std::string::npos) << res->body;
  }
}

// A cancelled job's previews stop: none comes after its `cancelled` event.
TEST(PreviewTest, ACancelledJobsPreviewsStop) {
  auto cluster = StartEmbedded(EmbeddedConfig{});
  ASSERT_NE(cluster, nullptr);
  const std::string url = "http://" + cluster->http_endpoint();
  auto id = client::Submit(url, Image(200, 1));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  // Cancel once a preview of step 2 or later is there (polled, bounded).
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  int seen = 0;
  while (seen < 2 && std::chrono::steady_clock::now() < deadline) {
    auto p = client::FetchPreview(url, *id, "");
    seen = p.ok() ? p->step : 0;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GE(seen, 2) << "no preview within 60 s";
  ASSERT_TRUE(client::Cancel(url, *id, "").ok());
  bool cancelled = false;
  for (const Event& e : Events(url, *id)) {
    cancelled = cancelled || e.type == "cancelled";
    EXPECT_FALSE(cancelled && e.type == "preview") << "a preview after the cancel";
  }
  EXPECT_TRUE(cancelled);
  auto p = client::FetchPreview(url, *id, "");
  ASSERT_TRUE(p.ok());
  EXPECT_LT(p->step, 200);
}

// Tenant A's previews are A's: B gets 404 for the image and the stream.
TEST(PreviewTest, ATenantSeesOnlyItsOwnPreviews) {
  EmbeddedConfig c;
  c.access.keys = {{"key-a", "a"}, {"key-b", "b"}};
  auto cluster = StartEmbedded(c);
  ASSERT_NE(cluster, nullptr);
  const std::string url = "http://" + cluster->http_endpoint();
  client::GenerateRequest r = Image(6, 1);
  r.api_key = "key-a";
  const auto at = std::chrono::steady_clock::now();
  auto id = client::Submit(url, r);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto done =
      client::WaitAndFetch(url, *id, false, at, 60s, client::WaitOptions{"key-a", {}, nullptr, {}});
  ASSERT_TRUE(done.ok() && done->status == "succeeded");
  EXPECT_TRUE(client::FetchPreview(url, *id, "key-a").ok());
  auto other = client::FetchPreview(url, *id, "key-b");
  EXPECT_EQ(other.status().code(), StatusCode::kNotFound) << other.status().ToString();
  EXPECT_FALSE(client::FetchPreview(url, *id, "").ok());
}

}  // namespace
}  // namespace sluice::testing
