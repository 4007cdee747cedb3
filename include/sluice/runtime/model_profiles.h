// sluice/runtime/model_profiles.h
//
// Published timings and payload sizes of real diffusion models (shared
// WORKLOADS.md: Wan2.1, HunyuanVideo, FLUX, Qwen-Image; H100 where given).
// One table for the profile stages (profile_stages.h), which spend these
// times on CPUs, and for the cluster simulator (src/sim/), which models
// them: what one measures, the other predicts.

#ifndef SLUICE_RUNTIME_MODEL_PROFILES_H_
#define SLUICE_RUNTIME_MODEL_PROFILES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice {

struct ModelProfile {
  std::string name;
  int steps = 50;
  double encode_s = 0;                        // Text encode, per request.
  double step_s = 0;                          // One denoise step (both CFG forwards).
  double decode_s = 0;                        // VAE decode, per request.
  std::vector<std::int64_t> condition_shape;  // bf16, E -> D.
  std::vector<std::int64_t> latent_shape;     // bf16, D -> V.
  std::uint64_t output_bytes = 0;             // Decoded pixels (uint8 RGB).
  // What the decode stage returns: the pixels encoded (PNG ~3:1 for
  // images, H.264 ~64:1 for videos).
  std::uint64_t encoded_bytes() const { return output_bytes / (video ? 64 : 3); }
  bool video = false;
  // Peak GPU memory, GB, with the encoder, the DiT and the VAE decode on
  // one GPU (colocated serving; WORKLOADS.md §3.5, published monolithic
  // figures, or derived where none is published).
  double colocated_peak_gb = 0;
  // A colocated decode's time over a decode alone when that peak exceeds
  // the GPU's memory: the DiT offloaded or the VAE decode tiled to make
  // room (a stated assumption, not a measurement).
  double over_memory_decode_factor = 1.3;
};

// The GPU memory colocated serving is planned for unless told otherwise,
// GB (an H100 or A100 80 GB).
inline constexpr double kDefaultGpuMemoryGb = 80;

// A decode's share of its time before its first output exists (the
// first frames of a video, streamed while the rest decodes).
inline constexpr double kFirstOutputShare = 0.1;

// wan2.1-480p, wan2.1-720p, hunyuan-720p, flux-1024, qwen-image-1024.
const std::vector<ModelProfile>& ModelProfiles();
// Errors: kInvalidArgument naming the profile and listing the known ones.
Result<ModelProfile> FindModelProfile(std::string_view name);

// Video frames of a video profile `p` (its latent shape [C, T, H, W]):
// (T - 1) * 4 + 1 (the VAE's 4x temporal compression; 81 for T = 21).
std::int64_t VideoFrames(const ModelProfile& p);

// Video profile `p` at `frames` frames (4k + 1): its latent's T and its
// decoded bytes at that length, its decode time in proportion to T (a
// derived figure; no published decode times per length) and its name
// suffixed "-<frames>f". Errors: kInvalidArgument (an image profile,
// frames not 4k + 1 in 5..1025).
Result<ModelProfile> AtFrames(const ModelProfile& p, std::int64_t frames);

}  // namespace sluice

#endif  // SLUICE_RUNTIME_MODEL_PROFILES_H_
