// The reference models: small real networks, shaped like the models sluice
// serves — a word-level text encoder, a DiT-style latent denoiser (patchify,
// self- and cross-attention blocks with timestep modulation) sampled by
// flow matching with classifier-free guidance, and a VAE-style
// convolutional decoder. Latents have 16 channels, 8× spatial and 4×
// temporal compression, as in Wan2.1 / FLUX-class models. The weights come
// from a safetensors file (the shipped ones were trained by
// python/sluice_model/train.py; docs/models/sluice-reference.md) or are
// random from a seed ("random:SEED", for tests of other sizes). The
// PyTorch mirror (python/sluice_model/net.py) computes the same numbers.
//
// Thread safety: the models are immutable after construction; every method
// may run on any number of threads at once. Results are bit-identical
// across threads and calls (see ops.h).
#ifndef SLUICE_RUNTIME_REFERENCE_MODELS_H_
#define SLUICE_RUNTIME_REFERENCE_MODELS_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

#include "runtime/reference/weights.h"

namespace sluice::reference {

inline constexpr int kTextLen = 64;  // Tokens per prompt (BOS + words, padded).
inline constexpr int kTextDim = 64;  // Text embedding width.
inline constexpr int kTextLayers = 2, kTextHeads = 4;
inline constexpr int kVocabRows = 256;  // PAD, BOS, the vocabulary, hash buckets.
inline constexpr int kLatentChannels = 4;
inline constexpr int kSpatialDown = 4;   // Pixels per latent cell, each axis.
inline constexpr int kTemporalDown = 4;  // Frames per latent frame after the first.
inline constexpr int kPatch = 4;         // Latent cells per token, each axis.
inline constexpr int kMaxTokens = 4096;  // Denoiser sequence limit.
// The denoiser's token positions are sinusoids of scale * (t, i, j); the
// scale is the weights' "position_scale" metadata, this without it.
inline constexpr float kDefaultPositionScale = 0.25f;
inline constexpr float kMaxPositionScale = 4.0f;
// The VAE decoder may have a residual block (a + conv(silu(conv(a)))) after
// each of its first kMaxDecoderBlocks stages: the weights' "decoder_blocks"
// metadata says after how many (absent: none).
inline constexpr int kMaxDecoderBlocks = 3;

class Adapter;  // A LoRA adapter (adapter.h).
// One adapter a sample runs with, and its scale (0: no effect). The
// adapter must outlive the calls it is passed to.
struct LoraTerm {
  const Adapter* adapter = nullptr;
  float scale = 1.0f;
};
// The adapters a sample runs with (empty: the base model).
using LoraTerms = std::span<const LoraTerm>;

// Latent geometry of a request: [kLatentChannels, t, h, w].
struct LatentShape {
  int t = 1, h = 0, w = 0;
  std::size_t elements() const { return static_cast<std::size_t>(kLatentChannels) * t * h * w; }
  int tokens() const { return t * (h / kPatch) * (w / kPatch); }
};

// Every tensor of the architecture with its shape (the names and shapes of
// python/sluice_model/net.py's shapes(decoder_blocks)): text.*, dit.*,
// vae.dec.* (with vae.dec.res<i>.{a,b}.{w,b} for i < decoder_blocks),
// vae.enc.* (the encoder: image edits) and preview.*. REQUIRES 0 <= decoder_blocks <=
// kMaxDecoderBlocks.
const std::vector<TensorSpec>& ReferenceArchitecture(int decoder_blocks = 0);

// Random weights of the architecture from `seed` (uniform, fan-in scaled),
// with an empty vocabulary (every word hashed).
std::shared_ptr<const WeightsFile> RandomReferenceWeights(std::uint64_t seed);

class TextEncoder {
 public:
  // `vocabulary`: the words numbered 2, 3, ... (at most kVocabRows - 3).
  TextEncoder(std::shared_ptr<const WeightsFile> w, std::vector<std::string> vocabulary);
  // The token ids of `text` (kTextLen, 0-padded) and how many are not
  // padding: 1 (BOS), then per word (lower-cased runs of ASCII letters and
  // digits) 2 + its vocabulary index, or else a bucket of its 32-bit FNV-1a
  // hash in [2 + vocabulary size, kVocabRows).
  std::vector<int> Tokens(std::string_view text, int* length = nullptr) const;
  // [kTextLen, kTextDim] for `text`.
  std::vector<float> Encode(std::string_view text) const;

 private:
  std::shared_ptr<const WeightsFile> w_;
  std::vector<std::string> vocabulary_;
};

class Denoiser {
 public:
  static constexpr int kDim = 96, kHeads = 4, kDepth = 3;
  // `position_scale`: in (0, kMaxPositionScale] (LoadModels checks it).
  explicit Denoiser(std::shared_ptr<const WeightsFile> w,
                    float position_scale = kDefaultPositionScale);
  float position_scale() const { return position_scale_; }
  // Floats of CrossKv's result: each block's cross-attention keys and
  // values of one condition.
  static constexpr std::size_t kCrossKvFloats =
      static_cast<std::size_t>(kDepth) * kTextLen * 2 * kDim;
  // The cross-attention keys and values every block computes from the
  // condition [kTextLen, kTextDim] (the same at every step): [kDepth,
  // kTextLen, 2 * kDim]. Velocity given them computes bit-identically.
  std::vector<float> CrossKv(const float* cond) const;
  // The clean latent x0 [kLatentChannels, t, h, w] the model predicts at
  // noise level `sigma` (1: pure noise) for latent x and condition
  // [kTextLen, kTextDim], written to `v`; `cross_kv` (optional):
  // CrossKv(cond), computed once; `lora`: adapters (Blocks). REQUIRES h,
  // w multiples of kPatch and s.tokens() <= kMaxTokens.
  void Velocity(const float* x, const LatentShape& s, float sigma, const float* cond, float* v,
                const float* cross_kv = nullptr, LoraTerms lora = {}) const;

  // Velocity's three parts, for a sampler that shares the embedding
  // between guidance's branches (it does not depend on the condition) or
  // skips the blocks on a step (the step cache, pipeline.h); Velocity is
  // Embed, Blocks, Head, bit for bit.
  // The tokens of x at noise level sigma, X [s.tokens(), kDim], and the
  // timestep conditioning c [kDim].
  void Embed(const float* x, const LatentShape& s, float sigma, float* X, float* c) const;
  // Block 0's modulated input of X [n, kDim] (its normed, timestep-
  // modulated self-attention input), written to out [n, kDim]: what the
  // step cache compares between steps.
  void ModulatedInput(const float* X, int n, const float* c, float* out) const;
  // Every block over X [n, kDim], in place; cond and cross_kv as Velocity's;
  // `lora`: the adapters' low-rank updates added to the layers they adapt
  // (adapter.h; empty: the base model, bit for bit). BlocksBatch with a
  // batch of one, bit for bit.
  void Blocks(float* X, int n, const float* c, const float* cond, const float* cross_kv,
              LoraTerms lora = {}) const;
  // Every block over `batch` samples X [batch, n, kDim] at once, in place:
  // the products run over every sample's tokens together, attention and
  // the modulation per sample (c[s], cond[s], cross_kv[s] as Blocks'; the
  // samples may be at different noise levels). A sample's result equals
  // Blocks' on it alone up to float32 rounding, not bit for bit: BLAS
  // orders its sums by the products' sizes. `lora` (null: none): each
  // sample's adapters, `batch` of them; a batch may mix adapters (each
  // sample's low-rank updates run on its own rows).
  void BlocksBatch(float* X, int batch, int n, const float* const* c, const float* const* cond,
                   const float* const* cross_kv, const LoraTerms* lora = nullptr) const;
  // The output layer: X [s.tokens(), kDim] (overwritten) to v.
  void Head(float* X, const LatentShape& s, const float* c, float* v) const;

 private:
  const float* W(const std::string& name) const { return w_->Data(name); }
  std::shared_ptr<const WeightsFile> w_;
  float position_scale_;
};

class Decoder {
 public:
  // `blocks`: residual blocks after that many stages, in [0,
  // kMaxDecoderBlocks] (LoadModels checks the metadata and the tensors).
  explicit Decoder(std::shared_ptr<const WeightsFile> w, int blocks = 0);
  int blocks() const { return blocks_; }
  // One frame: z [kLatentChannels, h, w] → rgb [4h, 4w, 3] (interleaved uint8).
  void DecodeFrame(const float* z, int h, int w, std::uint8_t* rgb) const;

 private:
  std::shared_ptr<const WeightsFile> w_;
  int blocks_;
};

// The VAE's encoder (image edits: the picture to start from).
class ImageEncoder {
 public:
  explicit ImageEncoder(std::shared_ptr<const WeightsFile> w) : w_(std::move(w)) {}
  // One picture: rgb [3, 4h, 4w] in [-1, 1] (planar) → z [kLatentChannels,
  // h, w]. REQUIRES h, w > 0.
  void EncodeFrame(const float* rgb, int h, int w, float* z) const;

 private:
  std::shared_ptr<const WeightsFile> w_;
};

// The models over one weights file.
struct Models {
  std::shared_ptr<const WeightsFile> weights;
  TextEncoder text;
  Denoiser denoiser;
  Decoder decoder;
  ImageEncoder image_encoder;
  // "2/" (the architecture's version) and a 64-bit FNV-1a digest of every
  // tensor's values, the vocabulary and the position scale, in hex: what cache and checkpoint
  // keys carry as the model's version, so workers on other weights never
  // share entries.
  std::string identity;
};

// The weights sluice ships (models/sluice-reference.safetensors): beside
// the binary (../share/sluice/models/) when installed, else in the source
// tree the binary was built from.
std::string DefaultReferenceWeights();

// Models from `weights`: a safetensors file, or "random:SEED" (decimal).
// Errors: kInvalidArgument / kNotFound naming the file, the tensor and what
// is wrong (weights.h; a missing, unexpected or misshapen tensor; a
// "vocabulary" metadata entry that is missing or malformed; a
// "position_scale" entry that is not a decimal in (0, kMaxPositionScale];
// a "decoder_blocks" entry that is not an integer in [0, kMaxDecoderBlocks]).
Result<std::unique_ptr<Models>> LoadModels(const std::string& weights);

// Sets the process's models (ReferenceModels) from `weights` (LoadModels).
// Call before the first use; a second call with the same argument is a
// no-op. Errors: LoadModels'; kFailedPrecondition once models of other
// weights are in use.
Status LoadReferenceModels(const std::string& weights);

// The process's models: those of LoadReferenceModels, or on first use
// without it the default weights (a process that cannot load them logs why
// and aborts).
const Models& ReferenceModels();

}  // namespace sluice::reference

#endif  // SLUICE_RUNTIME_REFERENCE_MODELS_H_
