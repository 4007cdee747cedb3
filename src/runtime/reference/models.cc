#include "runtime/reference/models.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "common/log.h"
#include "runtime/reference/ops.h"

namespace sluice::reference {
namespace {

constexpr int kPad = 0, kBos = 1;
// The VAE: the decoder's convolutions (the first at the latent's size, one
// per 2x upsampling stage, the output one) and the encoder's.
constexpr int kDecLayers = 4, kEncLayers = 4;
constexpr int kDecChannels[kDecLayers][2] = {{kLatentChannels, 64}, {64, 32}, {32, 16}, {16, 3}};
constexpr int kEncChannels[kEncLayers][2] = {{3, 16}, {16, 32}, {32, 64}, {64, kLatentChannels}};
static_assert(1 << (kDecLayers - 2) == kSpatialDown, "one 2x stage per halving");

std::vector<TensorSpec> BuildArchitecture(int decoder_blocks) {
  using S = std::vector<std::int64_t>;
  std::vector<TensorSpec> out;
  auto add = [&out](std::string name, S shape) {
    out.push_back({std::move(name), std::move(shape)});
  };
  constexpr std::int64_t td = kTextDim, d = Denoiser::kDim, pin = kLatentChannels * kPatch * kPatch;
  add("text.embed", {kVocabRows, td});
  for (int l = 0; l < kTextLayers; ++l) {
    const std::string p = "text.layers." + std::to_string(l) + ".";
    add(p + "qkv", {td, 3 * td});
    add(p + "qkv_b", {3 * td});
    add(p + "proj", {td, td});
    add(p + "proj_b", {td});
    add(p + "fc1", {td, 4 * td});
    add(p + "fc1_b", {4 * td});
    add(p + "fc2", {4 * td, td});
    add(p + "fc2_b", {td});
  }
  add("dit.patch", {pin, d});
  add("dit.patch_b", {d});
  add("dit.t1", {64, d});
  add("dit.t1_b", {d});
  add("dit.t2", {d, d});
  add("dit.t2_b", {d});
  add("dit.final_ada", {d, 2 * d});
  add("dit.final_ada_b", {2 * d});
  add("dit.out", {d, pin});
  add("dit.out_b", {pin});
  for (int b = 0; b < Denoiser::kDepth; ++b) {
    const std::string p = "dit.blocks." + std::to_string(b) + ".";
    add(p + "ada", {d, 6 * d});
    add(p + "ada_b", {6 * d});
    add(p + "qkv", {d, 3 * d});
    add(p + "qkv_b", {3 * d});
    add(p + "proj", {d, d});
    add(p + "proj_b", {d});
    add(p + "xq", {d, d});
    add(p + "xkv", {td, 2 * d});
    add(p + "xproj", {d, d});
    add(p + "fc1", {d, 4 * d});
    add(p + "fc1_b", {4 * d});
    add(p + "fc2", {4 * d, d});
    add(p + "fc2_b", {d});
  }
  for (int i = 0; i < kDecLayers; ++i) {
    const std::string p = "vae.dec." + std::to_string(i) + ".";
    add(p + "w", {kDecChannels[i][1], kDecChannels[i][0], 3, 3});
    add(p + "b", {kDecChannels[i][1]});
  }
  for (int i = 0; i < kEncLayers; ++i) {
    const std::string p = "vae.enc." + std::to_string(i) + ".";
    add(p + "w", {kEncChannels[i][1], kEncChannels[i][0], 3, 3});
    add(p + "b", {kEncChannels[i][1]});
  }
  add("preview.rgb", {kLatentChannels, 3});
  add("preview.rgb_b", {3});
  for (int i = 0; i < decoder_blocks; ++i) {
    const std::int64_t c = kDecChannels[i][1];
    for (const char* part : {"a", "b"}) {
      const std::string p = "vae.dec.res" + std::to_string(i) + "." + part + ".";
      add(p + "w", {c, c, 3, 3});
      add(p + "b", {c});
    }
  }
  return out;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The "vocabulary" metadata: words of lower-case ASCII letters and digits,
// one space apart, no repeats, leaving at least one hash bucket.
Result<std::vector<std::string>> ParseVocabulary(const WeightsFile& w) {
  const auto it = w.metadata().find("vocabulary");
  if (it == w.metadata().end()) {
    return InvalidArgumentError(
        "metadata: no \"vocabulary\" entry (the words the text encoder numbers)");
  }
  std::vector<std::string> words;
  std::string_view rest = it->second;
  while (!rest.empty()) {
    const std::size_t sp = rest.find(' ');
    const std::string_view word = rest.substr(0, sp);
    if (word.empty() || !std::all_of(word.begin(), word.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        })) {
      return InvalidArgumentError("metadata vocabulary: \"" + std::string(word) +
                                  "\" is not a word of lower-case ASCII letters and digits");
    }
    if (std::find(words.begin(), words.end(), word) != words.end()) {
      return InvalidArgumentError("metadata vocabulary: \"" + std::string(word) + "\" repeats");
    }
    words.emplace_back(word);
    rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
  }
  if (static_cast<int>(words.size()) > kVocabRows - 3) {
    return InvalidArgumentError("metadata vocabulary: " + std::to_string(words.size()) +
                                " words, the text encoder numbers at most " +
                                std::to_string(kVocabRows - 3));
  }
  return words;
}

// The "decoder_blocks" metadata: an integer in [0, kMaxDecoderBlocks]; 0
// when absent.
Result<int> ParseDecoderBlocks(const WeightsFile& w) {
  const auto it = w.metadata().find("decoder_blocks");
  if (it == w.metadata().end()) {
    return 0;
  }
  const std::string& text = it->second;
  int value = -1;
  const char* end = text.data() + text.size();
  const auto parsed = std::from_chars(text.data(), end, value);
  if (text.empty() || parsed.ec != std::errc() || parsed.ptr != end || value < 0 ||
      value > kMaxDecoderBlocks) {
    return InvalidArgumentError("metadata decoder_blocks: \"" + text +
                                "\" is not an integer in [0, " + std::to_string(kMaxDecoderBlocks) +
                                "]");
  }
  return value;
}

// The "position_scale" metadata: a decimal in (0, kMaxPositionScale];
// kDefaultPositionScale when absent.
Result<float> ParsePositionScale(const WeightsFile& w) {
  const auto it = w.metadata().find("position_scale");
  if (it == w.metadata().end()) {
    return kDefaultPositionScale;
  }
  const std::string& text = it->second;
  float value = 0.0f;
  const char* end = text.data() + text.size();
  const auto parsed = std::from_chars(text.data(), end, value, std::chars_format::general);
  if (text.empty() || parsed.ec != std::errc() || parsed.ptr != end) {
    return InvalidArgumentError("metadata position_scale: \"" + text + "\" is not a number");
  }
  if (!(value > 0.0f && value <= kMaxPositionScale)) {
    return InvalidArgumentError("metadata position_scale: \"" + text + "\" is not in (0, " +
                                std::to_string(static_cast<int>(kMaxPositionScale)) + "]");
  }
  return value;
}

}  // namespace

const std::vector<TensorSpec>& ReferenceArchitecture(int decoder_blocks) {
  static const std::array<std::vector<TensorSpec>, kMaxDecoderBlocks + 1> specs = [] {
    std::array<std::vector<TensorSpec>, kMaxDecoderBlocks + 1> out;
    for (int i = 0; i <= kMaxDecoderBlocks; ++i) {
      out[static_cast<std::size_t>(i)] = BuildArchitecture(i);
    }
    return out;
  }();
  return specs.at(static_cast<std::size_t>(decoder_blocks));
}

std::shared_ptr<const WeightsFile> RandomReferenceWeights(std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::pair<TensorSpec, std::vector<float>>> tensors;
  for (const TensorSpec& spec : ReferenceArchitecture()) {
    std::size_t n = 1;
    for (const std::int64_t d : spec.shape) {
      n *= static_cast<std::size_t>(d);
    }
    const std::string_view name = spec.name;
    std::vector<float> values;
    if (EndsWith(name, "_b") || EndsWith(name, ".b")) {
      values = rng.Fill(n, 0.02f);
    } else if (name == "text.embed") {
      values = rng.Fill(n, 1.0f);
    } else {
      const auto fan_in =
          static_cast<float>(spec.shape.size() == 4 ? spec.shape[1] * 9 : spec.shape[0]);
      float gain = 1.0f;
      if (EndsWith(name, "ada")) {
        gain = 0.25f;
      } else if (EndsWith(name, "fc1") || name == "dit.t1") {
        gain = 2.0f;
      } else if (name.substr(0, 8) == "vae.dec.") {
        gain = name == "vae.dec." + std::to_string(kDecLayers - 1) + ".w" ? 2.0f : 1.5f;
      }
      values = rng.Fill(n, std::sqrt(3.0f * gain / fan_in));
    }
    tensors.emplace_back(spec, std::move(values));
  }
  return WeightsFile::FromTensors(
      std::move(tensors), {{"vocabulary", ""}, {"source", "random:" + std::to_string(seed)}});
}

TextEncoder::TextEncoder(std::shared_ptr<const WeightsFile> w, std::vector<std::string> vocabulary)
    : w_(std::move(w)), vocabulary_(std::move(vocabulary)) {}

std::vector<int> TextEncoder::Tokens(std::string_view text, int* length) const {
  std::vector<int> ids(kTextLen, kPad);
  ids[0] = kBos;
  int n = 1;
  const int first_bucket = 2 + static_cast<int>(vocabulary_.size());
  const auto buckets = static_cast<std::uint32_t>(kVocabRows - first_bucket);
  std::string word;
  auto flush = [&] {
    if (word.empty()) {
      return;
    }
    if (n < kTextLen) {
      const auto it = std::find(vocabulary_.begin(), vocabulary_.end(), word);
      if (it != vocabulary_.end()) {
        ids[n] = 2 + static_cast<int>(it - vocabulary_.begin());
      } else {
        std::uint32_t h = 0x811c9dc5u;
        for (const char c : word) {
          h = (h ^ static_cast<unsigned char>(c)) * 0x01000193u;
        }
        ids[n] = first_bucket + static_cast<int>(h % buckets);
      }
      ++n;
    }
    word.clear();
  };
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= '0' && u <= '9') || (u >= 'a' && u <= 'z')) {
      word.push_back(c);
    } else if (u >= 'A' && u <= 'Z') {
      word.push_back(static_cast<char>(u - 'A' + 'a'));
    } else {
      flush();
    }
  }
  flush();
  if (length != nullptr) {
    *length = n;
  }
  return ids;
}

std::vector<float> TextEncoder::Encode(std::string_view text) const {
  constexpr int d = kTextDim, n = kTextLen;
  int len = 0;
  const std::vector<int> ids = Tokens(text, &len);
  const float* embed = w_->Data("text.embed");
  std::vector<float> x(static_cast<std::size_t>(n) * d);
  std::vector<float> pos(d);
  for (int i = 0; i < n; ++i) {
    Sinusoidal(static_cast<float>(i), d, pos.data());
    for (int c = 0; c < d; ++c) {
      x[static_cast<std::size_t>(i) * d + c] =
          embed[static_cast<std::size_t>(ids[static_cast<std::size_t>(i)]) * d + c] + pos[c];
    }
  }
  std::vector<float> h(x.size()), qkv(x.size() * 3), a(x.size()), f(x.size() * 4), scratch;
  for (int l = 0; l < kTextLayers; ++l) {
    const std::string p = "text.layers." + std::to_string(l) + ".";
    auto W = [&](const char* name) { return w_->Data(p + name); };
    h = x;
    LayerNorm(h.data(), n, d);
    Linear(h.data(), n, d, W("qkv"), W("qkv_b"), 3 * d, qkv.data());
    Attention(qkv.data(), 3 * d, qkv.data() + d, 3 * d, qkv.data() + 2 * d, 3 * d, n, n, d,
              kTextHeads, len, a.data(), d, scratch);
    Linear(a.data(), n, d, W("proj"), W("proj_b"), d, h.data());
    AddGated(x.data(), h.data(), n, d, nullptr);
    h = x;
    LayerNorm(h.data(), n, d);
    Linear(h.data(), n, d, W("fc1"), W("fc1_b"), 4 * d, f.data());
    Gelu(f.data(), f.size());
    Linear(f.data(), n, 4 * d, W("fc2"), W("fc2_b"), d, h.data());
    AddGated(x.data(), h.data(), n, d, nullptr);
  }
  LayerNorm(x.data(), n, d);
  return x;
}

Decoder::Decoder(std::shared_ptr<const WeightsFile> w, int blocks)
    : w_(std::move(w)), blocks_(blocks) {}

void Decoder::DecodeFrame(const float* z, int h, int w, std::uint8_t* rgb) const {
  auto conv = [this](int i, const float* x, int cin, int hh, int ww, float* y,
                     std::vector<float>& col) {
    const std::string p = "vae.dec." + std::to_string(i) + ".";
    Conv3x3(x, cin, hh, ww, w_->Data(p + "w"), w_->Data(p + "b"), kDecChannels[i][1], y, col);
  };
  std::vector<float> a(static_cast<std::size_t>(kDecChannels[0][1]) * h * w), b, col;
  // a += conv_b(silu(conv_a(a))): the residual block after stage i.
  auto residual = [&](int i, int ch) {
    const std::string p = "vae.dec.res" + std::to_string(i) + ".";
    b.resize(a.size() * 2);
    float* inner = b.data();
    float* out = b.data() + a.size();
    Conv3x3(a.data(), ch, h, w, w_->Data(p + "a.w"), w_->Data(p + "a.b"), ch, inner, col);
    Silu(inner, a.size());
    Conv3x3(inner, ch, h, w, w_->Data(p + "b.w"), w_->Data(p + "b.b"), ch, out, col);
    for (std::size_t k = 0; k < a.size(); ++k) {
      a[k] += out[k];
    }
  };
  conv(0, z, kLatentChannels, h, w, a.data(), col);
  Silu(a.data(), a.size());
  int ch = kDecChannels[0][1];
  for (int i = 0; i < kDecLayers - 1; ++i) {
    if (i > 0) {  // Stage i: upsample, convolve.
      b.resize(a.size() * 4);
      Upsample2x(a.data(), ch, h, w, b.data());
      h *= 2;
      w *= 2;
      a.resize(static_cast<std::size_t>(kDecChannels[i][1]) * h * w);
      conv(i, b.data(), ch, h, w, a.data(), col);
      Silu(a.data(), a.size());
      ch = kDecChannels[i][1];
    }
    if (i < blocks_) {
      residual(i, ch);
    }
  }
  b.resize(static_cast<std::size_t>(3) * h * w);
  conv(kDecLayers - 1, a.data(), ch, h, w, b.data(), col);
  Tanh(b.data(), b.size());
  const std::size_t plane = static_cast<std::size_t>(h) * w;
  for (std::size_t px = 0; px < plane; ++px) {
    for (int c = 0; c < 3; ++c) {
      const float v = (b[c * plane + px] + 1.0f) * 127.5f + 0.5f;
      rgb[px * 3 + c] = static_cast<std::uint8_t>(std::clamp(v, 0.0f, 255.0f));
    }
  }
}

void ImageEncoder::EncodeFrame(const float* rgb, int h, int w, float* z) const {
  // Convolutions with strides 1, 2, 2, 1 (python/sluice_model/net.py's
  // ENC_CHANNELS), SiLU between.
  constexpr int kStride[kEncLayers] = {1, 2, 2, 1};
  std::vector<float> a(rgb, rgb + static_cast<std::size_t>(3) * 4 * h * 4 * w), b, col;
  int ah = 4 * h, aw = 4 * w;
  for (int i = 0; i < kEncLayers; ++i) {
    const std::string p = "vae.enc." + std::to_string(i) + ".";
    const int oh = (ah - 1) / kStride[i] + 1, ow = (aw - 1) / kStride[i] + 1;
    float* out = z;
    if (i + 1 < kEncLayers) {
      b.resize(static_cast<std::size_t>(kEncChannels[i][1]) * oh * ow);
      out = b.data();
    }
    Conv3x3(a.data(), kEncChannels[i][0], ah, aw, w_->Data(p + "w"), w_->Data(p + "b"),
            kEncChannels[i][1], out, col, kStride[i]);
    if (i + 1 < kEncLayers) {
      Silu(b.data(), b.size());
      a.swap(b);
    }
    ah = oh;
    aw = ow;
  }
}

std::string DefaultReferenceWeights() {
  constexpr const char* kFile = "sluice-reference.safetensors";
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = exe.parent_path().parent_path() / "share" / "sluice" / "models" / kFile;
    if (std::filesystem::exists(installed, ec)) {
      return installed.string();
    }
  }
  return std::string(SLUICE_SOURCE_DIR) + "/models/" + kFile;
}

namespace {

// Models::identity of `file` (checked against the architecture).
std::string Identity(const WeightsFile& file, const std::vector<std::string>& vocabulary,
                     float position_scale, int decoder_blocks) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h = (h ^ p[i]) * 0x100000001b3ull;
    }
  };
  for (const TensorSpec& t : ReferenceArchitecture(decoder_blocks)) {
    const WeightsFile::Tensor* w = file.Find(t.name);
    mix(t.name.data(), t.name.size());
    mix(w->data, w->elements * sizeof(float));
  }
  for (const std::string& word : vocabulary) {
    mix(word.data(), word.size() + 1);  // With its terminator: words stay apart.
  }
  mix(&position_scale, sizeof(position_scale));
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return std::string("2/") + hex;
}

}  // namespace

Result<std::unique_ptr<Models>> LoadModels(const std::string& weights) {
  std::shared_ptr<const WeightsFile> file;
  constexpr std::string_view kRandom = "random:";
  if (weights.rfind(kRandom, 0) == 0) {
    std::uint64_t seed = 0;
    const char* begin = weights.data() + kRandom.size();
    const char* end = weights.data() + weights.size();
    const auto parsed = std::from_chars(begin, end, seed);
    if (begin == end || parsed.ec != std::errc() || parsed.ptr != end) {
      return InvalidArgumentError("weights: \"" + weights +
                                  "\": random:SEED takes a decimal seed (0..2^64-1)");
    }
    file = RandomReferenceWeights(seed);
  } else {
    SLUICE_ASSIGN_OR_RETURN(file, WeightsFile::Open(weights));
  }
  const Result<int> blocks = ParseDecoderBlocks(*file);
  if (!blocks.ok()) {
    return InvalidArgumentError(weights + ": " + std::string(blocks.status().message()));
  }
  const Status shape = file->Check(ReferenceArchitecture(*blocks));
  if (!shape.ok()) {
    return InvalidArgumentError(weights + ": " + std::string(shape.message()));
  }
  Result<std::vector<std::string>> vocabulary = ParseVocabulary(*file);
  if (!vocabulary.ok()) {
    return InvalidArgumentError(weights + ": " + std::string(vocabulary.status().message()));
  }
  const Result<float> position_scale = ParsePositionScale(*file);
  if (!position_scale.ok()) {
    return InvalidArgumentError(weights + ": " + std::string(position_scale.status().message()));
  }
  UseOneBlasThreadPerCall();
  std::string identity = Identity(*file, *vocabulary, *position_scale, *blocks);
  return std::unique_ptr<Models>(new Models{file, TextEncoder(file, std::move(*vocabulary)),
                                            Denoiser(file, *position_scale), Decoder(file, *blocks),
                                            ImageEncoder(file), std::move(identity)});
}

namespace {

std::mutex& ModelsMutex() {
  static std::mutex mu;
  return mu;
}
std::atomic<const Models*> g_models{nullptr};  // Set once, never freed.
std::string g_models_source;

}  // namespace

Status LoadReferenceModels(const std::string& weights) {
  std::lock_guard<std::mutex> lock(ModelsMutex());
  if (g_models.load() != nullptr) {
    if (weights == g_models_source) {
      return Status::Ok();
    }
    return FailedPreconditionError("reference models of " + g_models_source +
                                   " are already in use; cannot switch to " + weights);
  }
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Models> models, LoadModels(weights));
  g_models_source = weights;
  g_models.store(models.release(), std::memory_order_release);
  return Status::Ok();
}

const Models& ReferenceModels() {
  const Models* models = g_models.load(std::memory_order_acquire);
  if (models != nullptr) {
    return *models;
  }
  const std::string path = DefaultReferenceWeights();
  const Status loaded = LoadReferenceModels(path);
  if (!loaded.ok()) {
    SLUICE_LOG(critical, "reference models: cannot load the default weights: {}",
               loaded.ToString());
    std::abort();
  }
  return *g_models.load(std::memory_order_acquire);
}

}  // namespace sluice::reference
