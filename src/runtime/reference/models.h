// The reference models: small but real networks with fixed-seed weights
// generated at start-up (nothing is downloaded), shaped like the models
// sluice serves — a byte-level text encoder, a DiT-style latent denoiser
// (patchify, self- and cross-attention blocks with timestep modulation)
// sampled by flow matching with classifier-free guidance, and a VAE-style
// convolutional decoder. Latents have 16 channels, 8× spatial and 4×
// temporal compression, as in Wan2.1 / FLUX-class models.
//
// Thread safety: the models are immutable after construction; every method
// may run on any number of threads at once. Results are bit-identical
// across threads and calls (see ops.h).
#ifndef SLUICE_RUNTIME_REFERENCE_MODELS_H_
#define SLUICE_RUNTIME_REFERENCE_MODELS_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace sluice::reference {

inline constexpr int kTextLen = 64;  // Tokens per prompt (BOS + bytes, padded).
inline constexpr int kTextDim = 64;  // Text embedding width.
inline constexpr int kLatentChannels = 16;
inline constexpr int kSpatialDown = 8;   // Pixels per latent cell, each axis.
inline constexpr int kTemporalDown = 4;  // Frames per latent frame after the first.
inline constexpr int kPatch = 2;         // Latent cells per token, each axis.
inline constexpr int kMaxTokens = 4096;  // Denoiser sequence limit.

// Latent geometry of a request: [16, t, h, w].
struct LatentShape {
  int t = 1, h = 0, w = 0;
  std::size_t elements() const { return static_cast<std::size_t>(kLatentChannels) * t * h * w; }
  int tokens() const { return t * (h / kPatch) * (w / kPatch); }
};

class TextEncoder {
 public:
  explicit TextEncoder(std::uint64_t seed);
  // [kTextLen, kTextDim] for the UTF-8 bytes of `text` (truncated).
  std::vector<float> Encode(std::string_view text) const;

 private:
  struct Layer {
    std::vector<float> qkv, qkv_b, proj, proj_b, fc1, fc1_b, fc2, fc2_b;
  };
  std::vector<float> embed_;
  std::vector<Layer> layers_;
};

class Denoiser {
 public:
  static constexpr int kDim = 64, kHeads = 4, kDepth = 2;
  explicit Denoiser(std::uint64_t seed);
  // Floats of CrossKv's result: each block's cross-attention keys and
  // values of one condition.
  static constexpr std::size_t kCrossKvFloats =
      static_cast<std::size_t>(kDepth) * kTextLen * 2 * kDim;
  // The cross-attention keys and values every block computes from the
  // condition [kTextLen, kTextDim] (the same at every step): [kDepth,
  // kTextLen, 2 * kDim]. Velocity given them computes bit-identically.
  std::vector<float> CrossKv(const float* cond) const;
  // The velocity v [16, t, h, w] at noise level `sigma` (1: pure noise) for
  // latent x and condition [kTextLen, kTextDim]; `cross_kv` (optional):
  // CrossKv(cond), computed once. REQUIRES h, w even and s.tokens() <=
  // kMaxTokens.
  void Velocity(const float* x, const LatentShape& s, float sigma, const float* cond, float* v,
                const float* cross_kv = nullptr) const;

 private:
  struct Block {
    std::vector<float> ada, ada_b, qkv, qkv_b, proj, proj_b, xq, xkv, xproj, fc1, fc1_b, fc2, fc2_b;
  };
  std::vector<float> patch_, patch_b_, t1_, t1_b_, t2_, t2_b_, final_ada_, final_ada_b_, out_,
      out_b_;
  std::vector<Block> blocks_;
};

class Decoder {
 public:
  explicit Decoder(std::uint64_t seed);
  // One frame: z [16, h, w] → rgb [8h, 8w, 3] (interleaved uint8).
  void DecodeFrame(const float* z, int h, int w, std::uint8_t* rgb) const;

 private:
  struct Conv {
    std::vector<float> w, b;
    int cin = 0, cout = 0;
  };
  std::vector<Conv> convs_;  // in, three upsampling, out.
};

// The three models with the process-wide fixed seed, built once on first use.
struct Models {
  TextEncoder text;
  Denoiser denoiser;
  Decoder decoder;
};
const Models& ReferenceModels();

}  // namespace sluice::reference

#endif  // SLUICE_RUNTIME_REFERENCE_MODELS_H_
