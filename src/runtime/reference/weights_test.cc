#include "runtime/reference/weights.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/reference/models.h"

namespace sluice::reference {
namespace {

using nlohmann::json;

// A safetensors image: the header (padded with spaces to `pad_to`) and the
// data bytes.
std::string File(const json& header, const std::string& data, std::size_t pad_to = 8) {
  std::string text = header.dump();
  while ((8 + text.size()) % pad_to != 0) {
    text += ' ';
  }
  std::string out(8, '\0');
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  }
  return out + text + data;
}

std::string Floats(std::initializer_list<float> v) {
  std::string out(v.size() * 4, '\0');
  std::memcpy(out.data(), v.begin(), out.size());
  return out;
}

// Two tensors a [2] and b [1, 2] back to back.
json Good() {
  return {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
          {"b", {{"dtype", "F32"}, {"shape", {1, 2}}, {"data_offsets", {8, 16}}}},
          {"__metadata__", {{"vocabulary", "red blue"}}}};
}

std::string ErrorOf(const std::string& bytes) {
  auto r = WeightsFile::Parse(bytes);
  EXPECT_FALSE(r.ok()) << "accepted a bad file";
  if (r.ok()) {
    return "";
  }
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

#define EXPECT_ERROR(bytes, text)                                \
  do {                                                           \
    const std::string message = ErrorOf(bytes);                  \
    EXPECT_NE(message.find(text), std::string::npos) << message; \
  } while (0)

TEST(WeightsFileTest, ReadsTensorsAndMetadataInPlace) {
  const std::string data = Floats({1, 2, 3, 4});
  auto w = WeightsFile::Parse(File(Good(), data));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_NE((*w)->Find("b"), nullptr);
  EXPECT_EQ((*w)->Find("b")->shape, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ((*w)->Data("b")[1], 4.0f);
  EXPECT_EQ((*w)->Data("a")[0], 1.0f);
  EXPECT_EQ((*w)->Find("c"), nullptr);
  EXPECT_EQ((*w)->metadata().at("vocabulary"), "red blue");
  // A header whose length leaves the data unaligned is still read.
  auto odd = WeightsFile::Parse(File(Good(), data, 1));
  ASSERT_TRUE(odd.ok()) << odd.status().ToString();
  EXPECT_EQ((*odd)->Data("b")[1], 4.0f);
  // So is one with no data at all after an unaligned header (found by
  // weights_fuzz: the alignment copy of an empty body).
  auto empty = WeightsFile::Parse(File(json::object(), "", 1));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ((*empty)->tensor_count(), 0u);
}

TEST(WeightsFileTest, RefusesEachMalformedFileNamingWhatIsWrong) {
  const std::string data = Floats({1, 2, 3, 4});
  const std::string good = File(Good(), data);
  EXPECT_ERROR(good.substr(0, 5), "truncated: 5 bytes");
  EXPECT_ERROR(good.substr(0, 20), "runs past the end");
  EXPECT_ERROR(good.substr(0, good.size() - 1), "tensor b: data_offsets [8, 16] run past the end");
  std::string huge = good;
  huge[3] = 0x10;  // Header length 256 MiB + ...
  EXPECT_ERROR(huge, "over the 1048576-byte cap");
  EXPECT_ERROR(File(json::array({1, 2}), data), "not a JSON object");
  EXPECT_ERROR(File(json("text"), data), "not a JSON object");
  std::string broken = good;
  broken[9] = '!';
  EXPECT_ERROR(broken, "not a JSON object");

  json h = Good();
  h["a"]["dtype"] = "BF16";
  EXPECT_ERROR(File(h, data), "tensor a: dtype BF16, the reference models take F32");
  h = Good();
  h["a"].erase("dtype");
  EXPECT_ERROR(File(h, data), "tensor a: no string dtype");
  h = Good();
  h["a"]["shape"] = {-2};
  EXPECT_ERROR(File(h, data), "tensor a: shape holds other than non-negative integers");
  h = Good();
  h["a"]["shape"] = {3};
  EXPECT_ERROR(File(h, data), "tensor a: data_offsets [0, 8] hold 8 bytes, shape [3] needs 12");
  h = Good();
  h["b"]["data_offsets"] = {8, 24};
  h["b"]["shape"] = {4};
  EXPECT_ERROR(File(h, data), "tensor b: data_offsets [8, 24] run past the end of the 16");
  h = Good();
  h["b"]["data_offsets"] = {4, 12};
  EXPECT_ERROR(File(h, data), "tensors a and b overlap");
  h = Good();
  h["b"]["data_offsets"] = {16, 8};
  EXPECT_ERROR(File(h, data), "tensor b: data_offsets [16, 8] end before they begin");
  h = Good();
  h["b"]["data_offsets"] = {8};
  EXPECT_ERROR(File(h, data), "tensor b: data_offsets is not two non-negative integers");
  h = Good();
  h["b"]["data_offsets"] = {6, 14};
  EXPECT_ERROR(File(h, data), "do not start on a 4-byte boundary");
  h = Good();
  h["b"]["shape"] = {1ull << 40, 1ull << 40};
  EXPECT_ERROR(File(h, data), "tensor b: shape has too many elements");
  h = Good();
  h["__metadata__"] = {{"vocabulary", 3}};
  EXPECT_ERROR(File(h, data), "__metadata__.vocabulary is not a string");
  EXPECT_ERROR(File(Good(), Floats({1, std::numeric_limits<float>::quiet_NaN(), 3, 4})),
               "tensor a: element 1 is not finite");
}

TEST(WeightsFileTest, CheckNamesMissingUnexpectedAndMisshapenTensors) {
  auto w = WeightsFile::Parse(File(Good(), Floats({1, 2, 3, 4})));
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE((*w)->Check({{"a", {2}}, {"b", {1, 2}}}).ok());
  auto message = [&](const std::vector<TensorSpec>& spec) {
    return std::string((*w)->Check(spec).message());
  };
  EXPECT_EQ(message({{"a", {2}}, {"b", {1, 2}}, {"c", {5}}}), "missing tensor c (shape [5])");
  EXPECT_EQ(message({{"a", {2}}}),
            "unexpected tensor b (shape [1, 2]): not part of the architecture");
  EXPECT_EQ(message({{"a", {2}}, {"b", {2, 1}}}),
            "tensor b: shape [1, 2], the architecture needs [2, 1]");
}

TEST(WeightsFileTest, OpenMapsAFileAndNamesAMissingOne) {
  const std::string path = ::testing::TempDir() + "/weights_test.safetensors";
  { std::ofstream(path, std::ios::binary) << File(Good(), Floats({1, 2, 3, 4})); }
  auto w = WeightsFile::Open(path);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->Data("b")[0], 3.0f);
  auto missing = WeightsFile::Open(path + ".gone");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(".gone"), std::string::npos);
  { std::ofstream(path, std::ios::binary) << "abc"; }
  auto bad = WeightsFile::Open(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ": truncated: 3 bytes"), std::string::npos)
      << bad.status().message();
}

TEST(ReferenceWeightsTest, ModelsRefuseFilesOfAnotherArchitecture) {
  const std::string path = ::testing::TempDir() + "/other_arch.safetensors";
  { std::ofstream(path, std::ios::binary) << File(Good(), Floats({1, 2, 3, 4})); }
  auto m = LoadModels(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("unexpected tensor a"), std::string::npos)
      << m.status().message();
  EXPECT_EQ(LoadModels("random:x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadModels("random:").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadModels("/nonexistent/w.safetensors").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(LoadModels("random:7").ok());
}

// random:SEED's tensors as a file whose metadata is `metadata`.
// `extra`: more tensors (name → shape and values) after the architecture's.
std::string RandomWeightsFile(
    std::uint64_t seed, const json& metadata,
    const std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<float>>>& extra =
        {}) {
  const std::shared_ptr<const WeightsFile> w = RandomReferenceWeights(seed);
  json header = {{"__metadata__", metadata}};
  std::string data;
  auto add = [&](const std::string& name, const std::vector<std::int64_t>& shape, const float* v,
                 std::size_t n) {
    const std::size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(v), n * sizeof(float));
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  };
  for (const TensorSpec& spec : ReferenceArchitecture()) {
    const WeightsFile::Tensor* t = w->Find(spec.name);
    add(spec.name, spec.shape, t->data, t->elements);
  }
  for (const auto& [name, tensor] : extra) {
    add(name, tensor.first, tensor.second.data(), tensor.second.size());
  }
  return File(header, data);
}

// The denoiser's token positions scale by the "position_scale" metadata
// (0.25 without it): it changes the output and the identity, and a value
// that is not a number in (0, 4] is refused naming the entry.
TEST(ReferenceWeightsTest, ModelsReadThePositionScaleAndRefuseABadOne) {
  const std::string path = ::testing::TempDir() + "/position_scale.safetensors";
  // A loaded model maps its file for as long as it lives: the two compared
  // below each have their own.
  auto load = [&path](const json& metadata, const std::string& suffix = "") {
    { std::ofstream(path + suffix, std::ios::binary) << RandomWeightsFile(5, metadata); }
    return LoadModels(path + suffix);
  };
  auto plain = load({{"vocabulary", ""}}, ".plain");
  auto scaled = load({{"vocabulary", ""}, {"position_scale", "1.0"}}, ".scaled");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_TRUE(scaled.ok()) << scaled.status().ToString();
  EXPECT_EQ((*plain)->denoiser.position_scale(), kDefaultPositionScale);
  EXPECT_EQ((*scaled)->denoiser.position_scale(), 1.0f);
  EXPECT_NE((*plain)->identity, (*scaled)->identity);
  const LatentShape shape{1, 8, 8};
  std::vector<float> x(shape.elements()), a(x.size()), b(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(0.37f * static_cast<float>(i));
  }
  const std::vector<float> cond = (*plain)->text.Encode("a red circle");
  (*plain)->denoiser.Velocity(x.data(), shape, 0.5f, cond.data(), a.data());
  (*scaled)->denoiser.Velocity(x.data(), shape, 0.5f, cond.data(), b.data());
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  for (const char* bad : {"", "abc", "0", "-1", "4.5", "nan", "inf", "1.0x", " 1"}) {
    auto m = load({{"vocabulary", ""}, {"position_scale", bad}});
    ASSERT_FALSE(m.ok()) << "accepted position_scale \"" << bad << "\"";
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(path + ": metadata position_scale: \"" + bad + "\""),
              std::string::npos)
        << m.status().message();
  }
}

// Residual blocks after the decoder's first stages, as the "decoder_blocks"
// metadata declares: their tensors are checked like the others, zero
// second convolutions leave the picture as it was, others change it and
// the identity; a bad count is refused naming the entry.
TEST(ReferenceWeightsTest, DecoderBlocksFollowTheMetadata) {
  const std::string path = ::testing::TempDir() + "/decoder_blocks.safetensors";
  constexpr int kChannels[2] = {64, 32};  // The decoder's first two stages.
  auto blocks = [&](float second) {
    std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<float>>> out;
    for (int i = 0; i < 2; ++i) {
      const std::int64_t c = kChannels[i];
      const std::string p = "vae.dec.res" + std::to_string(i) + ".";
      std::vector<float> a(static_cast<std::size_t>(c * c * 9)), b(a.size(), second);
      for (std::size_t k = 0; k < a.size(); ++k) {
        a[k] = 0.05f * std::sin(0.11f * static_cast<float>(k));
      }
      out[p + "a.w"] = {{c, c, 3, 3}, a};
      out[p + "a.b"] = {{c}, std::vector<float>(static_cast<std::size_t>(c), 0.01f)};
      out[p + "b.w"] = {{c, c, 3, 3}, b};
      out[p + "b.b"] = {{c}, std::vector<float>(static_cast<std::size_t>(c), 0.0f)};
    }
    return out;
  };
  using Extra = decltype(blocks(0.0f));
  // Each load its own file: a loaded model maps its file for as long as
  // it lives.
  int files = 0;
  auto load = [&path, &files](const json& metadata, const Extra& extra) {
    const std::string file = path + "." + std::to_string(files++);
    { std::ofstream(file, std::ios::binary) << RandomWeightsFile(5, metadata, extra); }
    return LoadModels(file);
  };
  const json two = {{"vocabulary", ""}, {"decoder_blocks", "2"}};
  auto plain = load({{"vocabulary", ""}}, {});
  auto identity = load(two, blocks(0.0f));
  auto changed = load(two, blocks(0.002f));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_TRUE(identity.ok()) << identity.status().ToString();
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_EQ((*plain)->decoder.blocks(), 0);
  EXPECT_EQ((*identity)->decoder.blocks(), 2);
  EXPECT_NE((*plain)->identity, (*identity)->identity);
  std::vector<float> z(static_cast<std::size_t>(kLatentChannels) * 4 * 4);
  for (std::size_t i = 0; i < z.size(); ++i) {
    z[i] = std::sin(0.29f * static_cast<float>(i));
  }
  std::vector<std::uint8_t> a(4 * kSpatialDown * 4 * kSpatialDown * 3), b(a.size()), c(a.size());
  (*plain)->decoder.DecodeFrame(z.data(), 4, 4, a.data());
  (*identity)->decoder.DecodeFrame(z.data(), 4, 4, b.data());
  (*changed)->decoder.DecodeFrame(z.data(), 4, 4, c.data());
  EXPECT_EQ(a, b) << "zero second convolutions: the same picture";
  EXPECT_NE(a, c);
  // Declared but absent, present but undeclared, and a bad count.
  auto missing = load(two, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("vae.dec.res0.a.w"), std::string::npos)
      << missing.status().message();
  auto undeclared = load({{"vocabulary", ""}}, blocks(0.0f));
  ASSERT_FALSE(undeclared.ok());
  EXPECT_NE(undeclared.status().message().find("vae.dec.res"), std::string::npos)
      << undeclared.status().message();
  for (const char* bad : {"", "4", "-1", "x", "1.5", " 1"}) {
    auto m = load({{"vocabulary", ""}, {"decoder_blocks", bad}}, {});
    ASSERT_FALSE(m.ok()) << "accepted decoder_blocks \"" << bad << "\"";
    // Named after the file (path.N) and the entry.
    EXPECT_EQ(m.status().message().rfind(path, 0), 0u) << m.status().message();
    EXPECT_NE(m.status().message().find(std::string(": metadata decoder_blocks: \"") + bad + "\""),
              std::string::npos)
        << m.status().message();
  }
}

TEST(ReferenceWeightsTest, TheShippedWeightsLoadAndCarryTheVocabulary) {
  auto m = LoadModels(DefaultReferenceWeights());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // The shipped recipe (train.py's defaults) has three decoder blocks.
  EXPECT_EQ((*m)->weights->tensor_count(), ReferenceArchitecture(3).size());
  // "a" is word 0 → id 2; BOS is 1; padding 0.
  const std::vector<int> ids = (*m)->text.Tokens("A  red,circle");
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_EQ(ids[4], 0);
  EXPECT_NE(ids[2], ids[3]);
  // The PyTorch mirror's ids (python/sluice_model/tests/test_scenes.py).
  EXPECT_EQ((*m)->text.Tokens("lighthouse")[1], 155);
}

}  // namespace
}  // namespace sluice::reference
