#include "sluice/runtime/model_profiles.h"

namespace sluice {
namespace {

// Figures from WORKLOADS.md §3.1–3.5 (H100 where given). Colocated peaks:
// Wan 480p 39 GB and HunyuanVideo 720p 60 GB monolithic as published;
// Qwen-Image 58 GB published for Qwen-Image-2512 monolithic (1024² needs
// no more); Wan 720p derived, 69.1 GB published with the model offloaded
// during the decode plus the DiT's 28 GB of weights it would otherwise
// keep; FLUX derived, its 12B DiT (24 GB) + T5-XXL (9.4 GB) + CLIP-L and
// VAE (0.4 GB) + ~2 GB of activations.
const std::vector<ModelProfile> kProfiles = {
    {"wan2.1-480p",
     50,
     0.89,
     5.06,
     2.40,
     {512, 4096},
     {16, 21, 60, 104},
     81ull * 480 * 832 * 3,
     true,
     39,
     1.3},
    {"wan2.1-720p",
     50,
     0.89,
     5.76,
     2.40,
     {512, 4096},
     {16, 21, 90, 160},
     81ull * 720 * 1280 * 3,
     true,
     97.1,
     1.3},
    {"hunyuan-720p",
     50,
     0.30,
     38.1,
     2.40,
     {256, 4096},
     {16, 33, 90, 160},
     129ull * 720 * 1280 * 3,
     true,
     60,
     1.3},
    {"flux-1024",
     28,
     0.052,
     0.139,
     0.31,
     {512, 4096},
     {16, 128, 128},
     1024ull * 1024 * 3,
     false,
     36,
     1.3},
    {"qwen-image-1024",
     50,
     0.26,
     0.248,
     0.31,
     {512, 3584},
     {16, 1, 128, 128},
     1024ull * 1024 * 3,
     false,
     58,
     1.3},
};

}  // namespace

const std::vector<ModelProfile>& ModelProfiles() {
  return kProfiles;
}

std::int64_t VideoFrames(const ModelProfile& p) {
  return p.latent_shape.size() == 4 ? (p.latent_shape[1] - 1) * 4 + 1 : 1;
}

Result<ModelProfile> AtFrames(const ModelProfile& p, std::int64_t frames) {
  if (!p.video || p.latent_shape.size() != 4) {
    return InvalidArgumentError(p.name + " is not a video profile: no frames to set");
  }
  if (frames < 5 || frames > 1025 || (frames - 1) % 4 != 0) {
    return InvalidArgumentError("frames: " + std::to_string(frames) +
                                " is not 4k + 1 in 5..1025 (the VAE compresses time 4x)");
  }
  const std::int64_t t0 = p.latent_shape[1];
  const std::int64_t t = (frames - 1) / 4 + 1;
  ModelProfile out = p;
  out.name = p.name + "-" + std::to_string(frames) + "f";
  out.latent_shape[1] = t;
  out.decode_s = p.decode_s * static_cast<double>(t) / static_cast<double>(t0);
  out.output_bytes = p.output_bytes / static_cast<std::uint64_t>(VideoFrames(p)) *
                     static_cast<std::uint64_t>(frames);
  return out;
}

Result<ModelProfile> FindModelProfile(std::string_view name) {
  std::string known;
  for (const ModelProfile& p : kProfiles) {
    if (p.name == name) {
      return p;
    }
    known += (known.empty() ? "" : ", ") + p.name;
  }
  return InvalidArgumentError("unknown profile '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace sluice
