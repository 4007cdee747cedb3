// LoRA adapters of the reference denoiser: low-rank updates of its blocks'
// layers, trained apart from the base weights
// (python/sluice_model/train_adapter.py) and applied per request. For
// layer L of block b, an adapter holds dit.blocks.b.L.lora_a [in, rank]
// and dit.blocks.b.L.lora_b [rank, out]; with scale s, the layer computes
// x · W + s · (x · A) · B (+ its bias). An adapter may adapt any subset of
// the layers; the file is a safetensors file (weights.h) whose metadata
// names "format" kAdapterFormat, "version" kAdapterVersion, "base" (the
// base weights' "sluice-reference/2") and "rank".
//
// Thread safety: immutable after Parse / Open; shared by any number of
// threads and requests.
#ifndef SLUICE_RUNTIME_REFERENCE_ADAPTER_H_
#define SLUICE_RUNTIME_REFERENCE_ADAPTER_H_

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

#include "runtime/reference/models.h"
#include "runtime/reference/weights.h"

namespace sluice::reference {

inline constexpr std::string_view kAdapterFormat = "sluice-lora";
inline constexpr std::string_view kAdapterVersion = "1";
inline constexpr std::string_view kAdapterBase = "sluice-reference/2";
inline constexpr int kMaxAdapterRank = 64;
// The largest adapter file accepted (rank 64 on every layer is ~6 MiB).
inline constexpr std::size_t kMaxAdapterBytes = std::size_t{16} << 20;

// The block layers an adapter may update, in the order a block runs them.
enum class AdaptedLayer { kQkv, kProj, kXq, kXproj, kFc1, kFc2 };
inline constexpr int kAdaptedLayers = 6;
// The layer's name in tensor names ("qkv", ...).
std::string_view AdaptedLayerName(AdaptedLayer layer);

class Adapter {
 public:
  // One layer's update: a [in, rank], b [rank, out], pointing into the file.
  struct Update {
    const float* a = nullptr;
    const float* b = nullptr;
  };

  // Validates an adapter file's bytes: WeightsFile::Parse's checks, at most
  // kMaxAdapterBytes, the metadata above (format, version, base, a rank in
  // [1, kMaxAdapterRank]), every tensor one of a pair named as above with
  // the base layer's in/out sizes and the rank, at least one pair. Errors:
  // kInvalidArgument naming what is wrong (the tensor, its shape and the
  // shape expected).
  static Result<std::shared_ptr<const Adapter>> Parse(std::string bytes);
  // Parse of a file's bytes. Errors: kNotFound (no such file), Parse's
  // naming the path.
  static Result<std::shared_ptr<const Adapter>> Open(const std::string& path);

  int rank() const { return rank_; }
  // The update of `layer` in block `block`, or null when not adapted.
  // REQUIRES 0 <= block < Denoiser::kDepth.
  const Update* Find(int block, AdaptedLayer layer) const {
    const Update& u = updates_[block * kAdaptedLayers + static_cast<int>(layer)];
    return u.a == nullptr ? nullptr : &u;
  }
  // A 64-bit FNV-1a digest of the rank, every tensor's name and values, in
  // hex: what names the adapter in checkpoint keys and worker caches.
  const std::string& digest() const { return digest_; }
  // The file's size in bytes (what a worker's adapter cache charges).
  std::size_t bytes() const { return bytes_; }
  // The metadata's "name" ("" when absent).
  const std::string& name() const { return name_; }

 private:
  Adapter() = default;
  std::shared_ptr<const WeightsFile> file_;
  int rank_ = 0;
  std::array<Update, Denoiser::kDepth * kAdaptedLayers> updates_{};
  std::string digest_, name_;
  std::size_t bytes_ = 0;
};

// y[n, out] += Σ scale · (x[n, in] · A) · B over `terms` that adapt
// (`block`, `layer`); rows of x and y are `in` / `out` floats apart.
// `scratch` is resized to n × the largest rank.
void AddLora(const float* x, int n, int in, LoraTerms terms, int block, AdaptedLayer layer, int out,
             float* y, std::vector<float>& scratch);

}  // namespace sluice::reference

#endif  // SLUICE_RUNTIME_REFERENCE_ADAPTER_H_
