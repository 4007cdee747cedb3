#include "runtime/reference/adapter.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>

#include "runtime/reference/ops.h"

namespace sluice::reference {
namespace {

constexpr std::array<std::string_view, kAdaptedLayers> kLayerNames = {"qkv",   "proj", "xq",
                                                                      "xproj", "fc1",  "fc2"};

Status Bad(std::string_view what) {
  return InvalidArgumentError("adapter: " + std::string(what));
}

// The base layer's [in, out] of "dit.blocks.<b>.<layer>".
std::pair<std::int64_t, std::int64_t> BaseShape(const std::string& name) {
  for (const TensorSpec& t : ReferenceArchitecture()) {
    if (t.name == name) {
      return {t.shape[0], t.shape[1]};
    }
  }
  return {0, 0};
}

}  // namespace

std::string_view AdaptedLayerName(AdaptedLayer layer) {
  return kLayerNames[static_cast<int>(layer)];
}

Result<std::shared_ptr<const Adapter>> Adapter::Parse(std::string bytes) {
  if (bytes.size() > kMaxAdapterBytes) {
    return Bad("the file has " + std::to_string(bytes.size()) + " bytes, more than " +
               std::to_string(kMaxAdapterBytes));
  }
  const std::size_t size = bytes.size();
  Result<std::shared_ptr<const WeightsFile>> parsed = WeightsFile::Parse(std::move(bytes));
  if (!parsed.ok()) {
    return Bad("not a safetensors file (" + std::string(parsed.status().message()) + ")");
  }
  std::shared_ptr<const WeightsFile> file = std::move(*parsed);
  const auto& meta = file->metadata();
  auto field = [&meta](const char* key) {
    auto it = meta.find(key);
    return it == meta.end() ? std::string() : it->second;
  };
  if (field("format") != kAdapterFormat) {
    return Bad("metadata format \"" + field("format") + "\" is not \"" +
               std::string(kAdapterFormat) + "\"");
  }
  if (field("version") != kAdapterVersion) {
    return Bad("metadata version \"" + field("version") + "\" is not \"" +
               std::string(kAdapterVersion) + "\"");
  }
  if (field("base") != kAdapterBase) {
    return Bad("metadata base \"" + field("base") + "\": trained on other weights than \"" +
               std::string(kAdapterBase) + "\"");
  }
  const std::string rank_text = field("rank");
  int rank = 0;
  const auto rank_parsed =
      std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
  if (rank_text.empty() || rank_parsed.ec != std::errc() ||
      rank_parsed.ptr != rank_text.data() + rank_text.size() || rank < 1 ||
      rank > kMaxAdapterRank) {
    return Bad("metadata rank \"" + rank_text + "\" is not an integer in 1.." +
               std::to_string(kMaxAdapterRank));
  }
  std::shared_ptr<Adapter> a(new Adapter());
  a->rank_ = rank;
  a->bytes_ = size;
  a->name_ = field("name");
  // Every tensor must be one half of a layer's pair with the layer's sizes.
  std::size_t matched = 0;
  for (int b = 0; b < Denoiser::kDepth; ++b) {
    for (int l = 0; l < kAdaptedLayers; ++l) {
      const std::string layer =
          "dit.blocks." + std::to_string(b) + "." + std::string(kLayerNames[l]);
      const WeightsFile::Tensor* ta = file->Find(layer + ".lora_a");
      const WeightsFile::Tensor* tb = file->Find(layer + ".lora_b");
      if (ta == nullptr && tb == nullptr) {
        continue;
      }
      if (ta == nullptr || tb == nullptr) {
        return Bad(layer + ": lora_a and lora_b come in pairs; " +
                   (ta == nullptr ? "lora_a" : "lora_b") + " is missing");
      }
      const auto [in, out] = BaseShape(layer);
      const std::vector<std::int64_t> want_a = {in, rank}, want_b = {rank, out};
      if (ta->shape != want_a) {
        return Bad(layer + ".lora_a is " + ShapeText(ta->shape) + ", want " + ShapeText(want_a));
      }
      if (tb->shape != want_b) {
        return Bad(layer + ".lora_b is " + ShapeText(tb->shape) + ", want " + ShapeText(want_b));
      }
      a->updates_[b * kAdaptedLayers + l] = Update{ta->data, tb->data};
      matched += 2;
    }
  }
  if (matched == 0) {
    return Bad("no layer is adapted (want dit.blocks.<b>.<layer>.lora_a / lora_b)");
  }
  if (matched != file->tensor_count()) {
    return Bad("holds " + std::to_string(file->tensor_count() - matched) +
               " tensor(s) that adapt no layer (names: dit.blocks.<0.." +
               std::to_string(Denoiser::kDepth - 1) + ">.<qkv|proj|xq|xproj|fc1|fc2>.lora_a|b)");
  }
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h = (h ^ p[i]) * 0x100000001b3ull;
    }
  };
  mix(&rank, sizeof(rank));
  for (int b = 0; b < Denoiser::kDepth; ++b) {
    for (int l = 0; l < kAdaptedLayers; ++l) {
      const Update& u = a->updates_[b * kAdaptedLayers + l];
      if (u.a == nullptr) {
        continue;
      }
      const std::string layer =
          "dit.blocks." + std::to_string(b) + "." + std::string(kLayerNames[l]);
      const auto [in, out] = BaseShape(layer);
      mix(layer.data(), layer.size());
      mix(u.a, static_cast<std::size_t>(in) * rank * sizeof(float));
      mix(u.b, static_cast<std::size_t>(out) * rank * sizeof(float));
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  a->digest_ = hex;
  a->file_ = std::move(file);
  return std::shared_ptr<const Adapter>(std::move(a));
}

Result<std::shared_ptr<const Adapter>> Adapter::Open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFoundError("adapter: cannot open " + path);
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Result<std::shared_ptr<const Adapter>> a = Parse(std::move(bytes));
  if (!a.ok()) {
    return InvalidArgumentError(path + ": " + std::string(a.status().message()));
  }
  return a;
}

void AddLora(const float* x, int n, int in, LoraTerms terms, int block, AdaptedLayer layer, int out,
             float* y, std::vector<float>& scratch) {
  for (const LoraTerm& t : terms) {
    const Adapter::Update* u = t.adapter->Find(block, layer);
    if (u == nullptr || t.scale == 0.0f) {
      continue;
    }
    const int r = t.adapter->rank();
    scratch.resize(std::max(scratch.size(), static_cast<std::size_t>(n) * r));
    Linear(x, n, in, u->a, nullptr, r, scratch.data());
    LinearAccumulate(scratch.data(), n, r, u->b, t.scale, out, y);
  }
}

}  // namespace sluice::reference
