// Per-request LoRA adapters on the embedded deployment (reference
// stages): adapters registered from a directory and by POST /v1/adapters,
// kept in the store and loaded by the denoise workers; a served job with
// one gives the pipeline's bytes with it; bad input is refused by name.
#include "runtime/reference/adapter.h"

#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <gtest/gtest.h>

#include "sluice/serve/embedded.h"

#include "base64.h"
#include "embedded_start.h"
#include "runtime/reference/pipeline.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream bytes;
  bytes << f.rdbuf();
  return bytes.str();
}

const std::string kMirror = std::string(SLUICE_SOURCE_DIR) + "/models/adapters/mirror.safetensors";
constexpr char kRequest[] =
    R"({"prompt":"a large red circle on the left on a blue background","size":"128x128",)"
    R"("seed":1,"steps":12})";

// The picture of kRequest with the mirror adapter at `scale`, in one process.
std::string OneProcess(float scale) {
  auto r = reference::ParseRequest(kRequest, 12, 4.0f);
  auto mirror = reference::Adapter::Open(kMirror);
  EXPECT_TRUE(r.ok() && mirror.ok());
  const reference::LoraTerm terms[] = {{mirror->get(), scale}};
  auto out = reference::GenerateAll(*r, terms);
  EXPECT_TRUE(out.ok());
  return out.ok() ? out->first : std::string();
}

// kRequest with the mirror adapter for the steps before `k` and without it
// from `k` on, in one process (a resume that drops the adapter).
std::string Switched(int k) {
  auto r = reference::ParseRequest(kRequest, 12, 4.0f);
  auto mirror = reference::Adapter::Open(kMirror);
  EXPECT_TRUE(r.ok() && mirror.ok());
  const reference::LoraTerm terms[] = {{mirror->get(), 1.0f}};
  const std::vector<float> cond = reference::EncodeCondition(*r);
  std::vector<float> x = reference::InitialNoise(*r);
  for (int i = 0; i < r->steps; ++i) {
    reference::DenoiseStep(*r, cond.data(), i, x, nullptr, nullptr, nullptr,
                           i < k ? reference::LoraTerms(terms) : reference::LoraTerms());
  }
  reference::FrameDecoder dec(*r);
  EXPECT_TRUE(dec.AddLatentFrame(x.data(), 0).ok());
  return dec.Output();
}

std::string WithLora(const std::string& lora) {
  json j = json::parse(kRequest);
  j["lora"] = json::parse(lora);
  return j.dump();
}

TEST(AdapterTest, AServedAdapterIsThePipelinesAndBadInputIsRefusedByName) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sluice-adapters-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kMirror, dir / "mirror.safetensors");
  EmbeddedConfig c;
  c.workers = 3;
  c.adapters_dir = dir.string();
  auto cluster = StartEmbedded(c);
  ASSERT_NE(cluster, nullptr);
  httplib::Client http("http://" + cluster->http_endpoint());
  http.set_read_timeout(60, 0);

  auto listed = http.Get("/v1/adapters");
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->status, 200);
  const json list = json::parse(listed->body)["data"];
  ASSERT_EQ(list.size(), 1u) << listed->body;
  EXPECT_EQ(list[0]["id"], "mirror");
  EXPECT_EQ(list[0]["rank"], 8);
  const std::string digest = list[0]["digest"];
  EXPECT_EQ(digest, (*reference::Adapter::Open(kMirror))->digest());

  auto generate = [&](const std::string& body) {
    auto r = http.Post("/v1/images/generations", body, "application/json");
    EXPECT_TRUE(r);
    return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
  };
  const std::string want = OneProcess(1.0f);
  const std::string plain = OneProcess(0.0f);
  ASSERT_FALSE(want == plain) << "the adapter changes nothing";
  // The denoise stage's counts on a job's stage_done event.
  auto denoise_counts = [&](const std::string& job) {
    auto events = http.Get("/v1/jobs/" + job + "/events");
    EXPECT_TRUE(events);
    std::istringstream lines(events ? events->body : "");
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("data: ", 0) == 0 && line.find("\"stage_done\"") != std::string::npos) {
        const json e = json::parse(line.substr(6));
        if (e["stage"] == "denoise") {
          return e.value("counts", json::object());
        }
      }
    }
    return json::object();
  };
  auto [status, body] = generate(WithLora(R"([{"name":"mirror","scale":1}])"));
  ASSERT_EQ(status, 200) << body;
  EXPECT_TRUE(Unbase64(json::parse(body)["data"][0]["b64_json"]) == want)
      << "the served picture is not the pipeline's with the adapter";
  EXPECT_EQ(denoise_counts(json::parse(body)["id"])["adapter_loads"], 1)
      << "the first job naming it loads it from the store";
  std::tie(status, body) = generate(WithLora(R"([{"name":"mirror","scale":0.5}])"));
  ASSERT_EQ(status, 200) << body;
  EXPECT_TRUE(Unbase64(json::parse(body)["data"][0]["b64_json"]) == OneProcess(0.5f));
  EXPECT_EQ(denoise_counts(json::parse(body)["id"])["adapter_loads"], 0)
      << "the next finds it resident";
  std::tie(status, body) = generate(kRequest);
  ASSERT_EQ(status, 200) << body;
  EXPECT_TRUE(Unbase64(json::parse(body)["data"][0]["b64_json"]) == plain)
      << "a job without adapters after one with them is the base model's";

  // Checkpoints name the adapter: a kept job resumed with it is
  // byte-identical, one resumed without it runs its last steps unadapted.
  json keep = json::parse(WithLora(R"([{"name":"mirror"}])"));
  keep["keep_checkpoints"] = true;
  std::tie(status, body) = generate(keep.dump());
  ASSERT_EQ(status, 200) << body;
  const std::string kept = json::parse(body)["id"];
  json same = json::parse(WithLora(R"([{"name":"mirror"}])"));
  same["resume_from"] = {{"job", kept}, {"step", 6}};
  std::tie(status, body) = generate(same.dump());
  ASSERT_EQ(status, 200) << body;
  EXPECT_TRUE(Unbase64(json::parse(body)["data"][0]["b64_json"]) == want)
      << "resumed with its adapter, not byte-identical";
  json dropped = json::parse(kRequest);
  dropped["resume_from"] = {{"job", kept}, {"step", 6}};
  std::tie(status, body) = generate(dropped.dump());
  ASSERT_EQ(status, 200) << body;
  const std::string switched = Switched(6);
  EXPECT_FALSE(switched == want || switched == plain);
  EXPECT_TRUE(Unbase64(json::parse(body)["data"][0]["b64_json"]) == switched)
      << "resumed without the adapter: not the pipeline's";

  // Registered by POST: the same file under another name (one copy in the
  // store: same digest), written to the directory; refused twice.
  const std::string file = ReadFile(kMirror);
  auto posted = http.Post("/v1/adapters?name=mirror-two", file, "application/octet-stream");
  ASSERT_TRUE(posted);
  ASSERT_EQ(posted->status, 201) << posted->body;
  EXPECT_EQ(json::parse(posted->body)["digest"], digest);
  EXPECT_TRUE(std::filesystem::exists(dir / "mirror-two.safetensors"));
  std::tie(status, body) = generate(WithLora(R"([{"name":"mirror-two"}])"));
  ASSERT_EQ(status, 200) << body;
  EXPECT_TRUE(Unbase64(json::parse(body)["data"][0]["b64_json"]) == want);
  posted = http.Post("/v1/adapters?name=mirror-two", file, "application/octet-stream");
  ASSERT_TRUE(posted);
  EXPECT_EQ(posted->status, 409) << posted->body;

  // Refusals, each naming what is wrong.
  struct Case {
    std::string path, body;
    int status;
    std::string says;
  };
  std::string misshapen = file;  // Rank 8 recorded as 4: every tensor's shape disagrees.
  const auto rank = misshapen.find("\"rank\":\"8\"");
  ASSERT_NE(rank, std::string::npos);
  misshapen[rank + 8] = '4';
  const std::vector<Case> cases = {
      {"/v1/images/generations", WithLora(R"([{"name":"nope"}])"), 404, "adapter_not_found"},
      {"/v1/images/generations", WithLora(R"([{"name":"mirror","scale":5}])"), 400,
       "lora[0].scale"},
      {"/v1/images/generations", WithLora(R"([{"name":"a/b"}])"), 400, "lora[0].name"},
      {"/v1/images/generations", WithLora(R"([{"name":"mirror","weight":1}])"), 400,
       "lora[0].weight"},
      {"/v1/images/generations", WithLora(R"({"name":"mirror"})"), 400, "lora: "},
      {"/v1/videos", WithLora(R"([{"name":"nope"}])"), 404, "adapter_not_found"},
      {"/v1/adapters?name=bad", misshapen, 400, "want [96, 4]"},
      {"/v1/adapters?name=bad", "not an adapter", 400, "adapter: not a safetensors file"},
      {"/v1/adapters", file, 400, "name: required"},
      {"/v1/adapters?name=.hidden", file, 400, "name: "},
  };
  for (const Case& k : cases) {
    auto r = http.Post(k.path, k.body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, k.status) << k.path << ": " << r->body;
    EXPECT_NE(r->body.find(k.says), std::string::npos) << k.path << ": " << r->body;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.safetensors"));

  // Removed: its name is unknown, its file gone; the other name still
  // serves the same file.
  auto removed = http.Delete("/v1/adapters/mirror-two");
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->status, 200) << removed->body;
  EXPECT_FALSE(std::filesystem::exists(dir / "mirror-two.safetensors"));
  std::tie(status, body) = generate(WithLora(R"([{"name":"mirror-two"}])"));
  EXPECT_EQ(status, 404) << body;
  std::tie(status, body) = generate(WithLora(R"([{"name":"mirror"}])"));
  ASSERT_EQ(status, 200) << body;
  EXPECT_TRUE(Unbase64(json::parse(body)["data"][0]["b64_json"]) == want);
  removed = http.Delete("/v1/adapters/mirror-two");
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->status, 404);
  cluster.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::testing
