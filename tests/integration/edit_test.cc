// Image edits on the embedded deployment (`POST /v1/images/edits`,
// reference stages, the condition cache on): a served edit gives the
// pipeline's bytes in one process, a repeated one finds its encoded
// picture in the cache, and every malformed part is refused by name; a
// model whose workers read no picture refuses one.
#include <httplib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <gtest/gtest.h>

#include "sluice/client/http_client.h"
#include "sluice/serve/embedded.h"

#include "base64.h"
#include "embedded_start.h"
#include "media/png.h"
#include "runtime/reference/pipeline.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

constexpr char kBoundary[] = "sluice-edit-test-boundary";

std::string Golden(const std::string& name) {
  std::ifstream f(std::string(SLUICE_SOURCE_DIR) + "/tests/golden/" + name, std::ios::binary);
  std::stringstream bytes;
  bytes << f.rdbuf();
  return bytes.str();
}

// A multipart/form-data body of text fields and, when `picture` is not
// empty, the picture as the file part `picture_field`.
std::string Form(const std::vector<std::pair<std::string, std::string>>& fields,
                 const std::string& picture, const std::string& picture_field = "image") {
  std::string body;
  for (const auto& [name, value] : fields) {
    body += std::string("--") + kBoundary + "\r\nContent-Disposition: form-data; name=\"" + name +
            "\"\r\n\r\n" + value + "\r\n";
  }
  if (!picture.empty()) {
    body += std::string("--") + kBoundary + "\r\nContent-Disposition: form-data; name=\"" +
            picture_field + "\"; filename=\"in.png\"\r\nContent-Type: image/png\r\n\r\n" + picture +
            "\r\n";
  }
  return body + "--" + kBoundary + "--\r\n";
}

const std::string kType = std::string("multipart/form-data; boundary=") + kBoundary;
const std::vector<std::pair<std::string, std::string>> kFields = {
    {"prompt", "a large green circle on the left on a blue background"},
    {"strength", "0.6"},
    {"seed", "2"},
    {"steps", "12"},
    {"size", "128x128"}};

constexpr char kEditRequest[] =
    R"({"prompt":"a large green circle on the left on a blue background","size":"128x128",)"
    R"("seed":2,"steps":12})";

// The same edit of `request` (JSON, as a stage sees it without the
// picture) in one process: the picture encoded, noised at the strength's
// step, sampled to the end (through a step cache of `step_cache`, 0: none)
// and decoded — the PNG, or a video's frames archive.
std::string OneProcess(const std::string& picture, const char* request = kEditRequest,
                       float strength = 0.6f, float step_cache = 0) {
  auto r = reference::ParseRequest(request, 12, 4.0f);
  EXPECT_TRUE(r.ok());
  auto px = media::DecodePng(picture);
  EXPECT_TRUE(px.ok());
  const std::vector<float> z0 = reference::EncodePicture(*r, px->rgb.data(), px->width, px->height);
  const int start = reference::EditStartStep(r->steps, strength);
  std::vector<float> x = reference::EditStartLatent(*r, z0, start);
  const std::vector<float> cond = reference::EncodeCondition(*r);
  reference::StepCache cache;
  cache.threshold = step_cache;
  for (int i = start; i < r->steps; ++i) {
    reference::DenoiseStep(*r, cond.data(), i, x, nullptr, nullptr, &cache);
  }
  EXPECT_EQ(cache.skipped > 0, step_cache > 0) << "the cache skipped no step of the edit";
  reference::FrameDecoder dec(*r);
  for (int k = 0; k < r->latent().t; ++k) {
    EXPECT_TRUE(dec.AddLatentFrame(x.data(), k).ok());
  }
  EXPECT_EQ(dec.frames_done(), static_cast<std::size_t>(r->frames));
  return dec.Output();
}

TEST(EditTest, AServedEditIsThePipelinesAndBadPartsAreRefusedByName) {
  EmbeddedConfig c;
  c.workers = 3;
  auto cluster = StartEmbedded(c);
  ASSERT_NE(cluster, nullptr);
  httplib::Client http("http://" + cluster->http_endpoint());
  http.set_read_timeout(60, 0);
  const std::string picture = Golden("reference_torch_128.png");
  ASSERT_FALSE(picture.empty());
  const std::string want = OneProcess(picture);

  for (int round = 0; round < 2; ++round) {  // The second finds its picture encoded.
    auto r = http.Post("/v1/images/edits", Form(kFields, picture), kType);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json body = json::parse(r->body);
    EXPECT_TRUE(Unbase64(body["data"][0]["b64_json"]) == want)
        << "round " << round << ": the served edit is not the pipeline's";
  }
  // The texts' embeddings and the encoded picture: three condition entries.
  EXPECT_EQ(cluster->store_metrics().cache_classes["condition"].objects, 3u);

  // The edit redrew the circle green where the red one was.
  auto out = media::DecodePng(want);
  ASSERT_TRUE(out.ok());
  EXPECT_GT(out->rgb[(64 * 128 + 28) * 3 + 1], 120);
  EXPECT_LT(out->rgb[(64 * 128 + 28) * 3 + 0], 100);

  struct Case {
    std::string body, content_type, param;
  };
  auto with = [&](const std::string& name, const std::string& value) {
    std::vector<std::pair<std::string, std::string>> f = kFields;
    for (auto& [k, v] : f) {
      if (k == name) {
        v = value;
        return f;
      }
    }
    f.emplace_back(name, value);
    return f;
  };
  const std::vector<Case> cases = {
      {Form(kFields, ""), kType, "image"},
      {Form(kFields, "not a png at all"), kType, "image"},
      {Form(with("mask", "x"), picture), kType, "mask"},
      {Form(with("strength", "0"), picture), kType, "strength"},
      {Form(with("strength", "1.5"), picture), kType, "strength"},
      {Form(with("size", "1024x1024"), picture), kType, "size"},
      {Form(with("colour", "red"), picture), kType, "colour"},
      {Form(with("prompt", ""), picture), kType, "prompt"},
      {R"({"prompt":"x"})", "application/json", "body"},
  };
  for (const Case& k : cases) {
    auto r = http.Post("/v1/images/edits", k.body, k.content_type);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << k.param << ": " << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], k.param) << r->body;
  }
  // Two pictures are one too many; so is a picture larger than 4 MiB.
  std::string two = Form(kFields, picture);
  two.insert(two.rfind(std::string("--") + kBoundary + "--"),
             std::string("--") + kBoundary +
                 "\r\nContent-Disposition: form-data; name=\"image\"; "
                 "filename=\"b.png\"\r\n\r\n" +
                 picture + "\r\n");
  auto r = http.Post("/v1/images/edits", two, kType);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("one picture per edit"), std::string::npos) << r->body.substr(0, 300);
  r = http.Post("/v1/images/edits", Form(kFields, std::string(5 << 20, 'x')), kType);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body.substr(0, 200);
  EXPECT_NE(r->body.find("at most 4 MiB"), std::string::npos) << r->body.substr(0, 200);
}

// Edits compose with the step cache (the deployment's default, or the
// request's own from the form): the edit's steps go through it from the
// first one it samples, giving the pipeline's cached bytes, not the
// uncached ones.
TEST(EditTest, AnEditRunsThroughTheStepCache) {
  EmbeddedConfig c;
  c.workers = 3;
  c.step_cache_threshold = 0.3f;
  auto cluster = StartEmbedded(c);
  ASSERT_NE(cluster, nullptr);
  httplib::Client http("http://" + cluster->http_endpoint());
  http.set_read_timeout(60, 0);
  const std::string picture = Golden("reference_torch_128.png");
  const std::string cached = OneProcess(picture, kEditRequest, 0.6f, 0.3f);
  ASSERT_FALSE(cached == OneProcess(picture)) << "the cache changes nothing here";
  auto r = http.Post("/v1/images/edits", Form(kFields, picture), kType);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_TRUE(Unbase64(json::parse(r->body)["data"][0]["b64_json"]) == cached)
      << "the served edit did not go through the step cache";

  // The request's own threshold, as OpenAI's SDKs write a nested field in
  // a form (and as JSON text), wins over the worker's; a bad one is
  // refused by name.
  const std::string own = OneProcess(picture, kEditRequest, 0.6f, 0.15f);
  ASSERT_FALSE(own == cached);
  for (const auto& field : std::vector<std::pair<std::string, std::string>>{
           {"step_cache[threshold]", "0.15"}, {"step_cache", R"({"threshold":0.15})"}}) {
    auto fields = kFields;
    fields.push_back(field);
    r = http.Post("/v1/images/edits", Form(fields, picture), kType);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << field.first << ": " << r->body;
    EXPECT_TRUE(Unbase64(json::parse(r->body)["data"][0]["b64_json"]) == own)
        << field.first << " did not reach the denoise stage";
  }
  auto fields = kFields;
  fields.push_back({"step_cache[threshold]", "7"});
  r = http.Post("/v1/images/edits", Form(fields, picture), kType);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find(R"("param":"step_cache")"), std::string::npos) << r->body;
}

// A video from a reference picture (OpenAI's input_reference, multipart):
// every latent frame starts from the picture, noised at the strength's
// step; the served frames are the pipeline's in one process. A strength
// without a picture is refused.
TEST(EditTest, AVideoFromAReferencePictureIsThePipelines) {
  EmbeddedConfig c;
  c.workers = 3;
  auto cluster = StartEmbedded(c);
  ASSERT_NE(cluster, nullptr);
  const std::string url = "http://" + cluster->http_endpoint();
  httplib::Client http(url);
  http.set_read_timeout(60, 0);
  const std::string picture = Golden("reference_torch_128.png");
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"prompt", "a large green circle moving right on a blue background"},
      {"strength", "0.7"},
      {"seed", "3"},
      {"steps", "12"},
      {"frames", "5"},
      {"size", "128x128"}};
  auto r = http.Post("/v1/videos", Form(fields, picture, "input_reference"), kType);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string id = json::parse(r->body)["id"];
  auto got = client::WaitAndFetch(url, id, /*mp4=*/false, std::chrono::steady_clock::now(),
                                  std::chrono::seconds(120));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->status, "succeeded") << got->error;

  const std::string want =
      OneProcess(picture,
                 R"({"prompt":"a large green circle moving right on a blue background",)"
                 R"("size":"128x128","seed":3,"steps":12,"frames":5})",
                 0.7f);
  EXPECT_TRUE(got->content == want) << "the served frames are not the pipeline's";

  r = http.Post("/v1/videos", Form(fields, ""), kType);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "strength") << r->body;
}

// A model whose workers read no picture (the profile stand-ins) refuses an
// edit and a video's input_reference by name, and still takes a request
// without one.
TEST(EditTest, AModelThatTakesNoPictureRefusesOne) {
  EmbeddedConfig c;
  c.workers = 3;
  c.stages = "flux-1024";
  auto cluster = StartEmbedded(c);
  ASSERT_NE(cluster, nullptr);
  httplib::Client http("http://" + cluster->http_endpoint());
  http.set_read_timeout(60, 0);
  const std::string picture = Golden("reference_torch_128.png");
  std::vector<std::pair<std::string, std::string>> fields = kFields;
  fields.emplace_back("model", "flux-1024");
  auto r = http.Post("/v1/images/edits", Form(fields, picture), kType);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  json error = json::parse(r->body)["error"];
  EXPECT_EQ(error["param"], "image") << r->body;
  EXPECT_EQ(error["code"], "picture_not_supported") << r->body;
  EXPECT_NE(error["message"].get<std::string>().find("model 'flux-1024' does not take a picture"),
            std::string::npos)
      << r->body;

  fields = {{"prompt", "a river"}, {"model", "wan2.1-480p"}, {"size", "128x128"}};
  r = http.Post("/v1/videos", Form(fields, picture, "input_reference"), kType);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  error = json::parse(r->body)["error"];
  EXPECT_EQ(error["param"], "input_reference") << r->body;
  EXPECT_NE(error["message"].get<std::string>().find("'wan2.1-480p'"), std::string::npos)
      << r->body;

  r = http.Post("/v1/images/generations",
                R"({"prompt":"a heron","model":"flux-1024","size":"128x128"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace sluice::testing
