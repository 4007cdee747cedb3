// The reference pipeline's steps, shared by the disaggregated stage
// handlers and the colocated one (so both give the same bytes): request
// parsing, text encoding (prompt and negative prompt), the flow-matching
// sampler with classifier-free guidance, frame decoding and the final
// PNG / frames archive. Deterministic (see ops.h).
#ifndef SLUICE_RUNTIME_REFERENCE_PIPELINE_H_
#define SLUICE_RUNTIME_REFERENCE_PIPELINE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

#include "runtime/reference/models.h"

namespace sluice::reference {

// The most pixels an edit's picture may have (its header is checked
// before any pixel buffer is allocated).
inline constexpr std::int64_t kMaxEditPixels = std::int64_t{2048} * 2048;

struct Request {
  std::string prompt, negative_prompt;
  int width = 128, height = 128;  // The size the shipped weights were trained at.
  bool video = false;
  int frames = 1, fps = 16;
  std::int64_t seed = 0;
  int steps = 12;
  float guidance = 4.0f;
  int preview_every = 0;  // Denoise: a preview every k steps (0: none).
  // step_cache.threshold (StepCache; 0: off); absent: the deployment's.
  std::optional<float> step_cache;
  // An image edit: the picture to start from (the request's "image", a
  // base64 PNG) and how much of it is redrawn ("strength", (0, 1]).
  struct Edit {
    int width = 0, height = 0;
    std::vector<std::uint8_t> rgb;  // [height][width][3]
    float strength = 0.8f;
  };
  std::optional<Edit> edit;
  // LoRA adapters ("lora"): each by name, scale and digest (the
  // orchestrator adds the digest of the file registered under the name).
  struct Lora {
    std::string name, digest;
    float scale = 1.0f;
  };
  std::vector<Lora> lora;
  // Latent cells cover the image rounded up to 16 pixels (decoded frames
  // are cropped back); t = 1 + ceil((frames - 1) / 4).
  LatentShape latent() const;
};

// The orchestrator's request JSON (prompt, size "WxH", seed, steps,
// guidance, negative_prompt, preview_every, step_cache {"threshold": t},
// lora [{"name", "scale", "digest"}] (common/adapters.h's limits);
// edits and videos from a picture: image (a base64 PNG, at most
// kMaxEditPixels), strength; video: frames, fps). Errors: kInvalidArgument
// naming the field, including sizes beyond the model (kMaxTokens).
Result<Request> ParseRequest(std::string_view json, int default_steps, float default_guidance);

// [2, kTextLen, kTextDim]: the prompt's embedding, then the negative one's.
std::vector<float> EncodeCondition(const Request& r);
// [kTextLen, kTextDim]: one text's embedding (half of EncodeCondition's).
std::vector<float> EncodeText(std::string_view text);
// The seed's Gaussian noise, [kLatentChannels, t, h, w].
std::vector<float> InitialNoise(const Request& r);
// The step cache (TeaCache / FBCache family), one per sampled job. A step
// whose block-0 modulated input (Denoiser::ModulatedInput) differs from
// the one of the last step that ran the blocks by less than `threshold`
// (relative L1: sum |a - b| / sum |b|) runs no block: each of guidance's
// branches adds that step's residual (the blocks' output minus their
// input) to its tokens instead. The first step always runs them.
struct StepCache {
  // The largest threshold a request may ask for.
  static constexpr float kMaxThreshold = 1.0f;
  float threshold = 0;            // 0: off, every step runs the blocks.
  std::vector<float> anchor;      // [n, kDim]: the modulated input at the last full step.
  std::vector<float> residual;    // [2, n, kDim]: conditional then unconditional residual there.
  int computed = 0, skipped = 0;  // Steps that ran the blocks, steps that did not.
};

// The step cache's state as bytes, kept beside a step checkpoint so a job
// resumed there continues with the cache it had (and the bytes it would
// have had): a header (magic, tokens, width, computed, skipped) and, once
// a step ran the blocks, the anchor and the residuals. The threshold is
// the request's, not part of the state.
std::string SerializeStepCache(const StepCache& c);
// Restores `c`'s state (not its threshold) from SerializeStepCache's
// bytes for a latent of `tokens` tokens. Errors: kInvalidArgument (not
// such a state: wrong magic, token count or width, or size); `c` is then
// unchanged.
Status RestoreStepCache(std::string_view bytes, int tokens, StepCache* c);

// Sampler step `step` (0-based) of r.steps, σ(i) = 1 − i/steps: the model
// predicts the clean latent x0 = x0_u + g · (x0_c − x0_u) (guidance g), and
// x += (σ(step+1) − σ(step)) · (x − x0) / σ(step).
// `negative_kv` (optional): Denoiser::CrossKv of the negative condition
// (shared by every request with that negative prompt); bit-identical.
// `x0` (optional): receives the step's guided prediction of the clean
// latent (for previews; no extra compute).
// `cache` (optional): the job's step cache; with threshold 0 or null the
// step runs every block (bit-identical either way).
// `lora`: the adapters both branches run with (Denoiser::Blocks; empty:
// the base model).
void DenoiseStep(const Request& r, const float* cond, int step, std::vector<float>& x,
                 const float* negative_kv = nullptr, std::vector<float>* x0 = nullptr,
                 StepCache* cache = nullptr, LoraTerms lora = {});

// One job's sampler step in a batch (DenoiseStep's arguments); the
// pointers must outlive the call.
struct SampleStep {
  const Request* r = nullptr;
  const float* cond = nullptr;  // [2, kTextLen, kTextDim]
  int step = 0;
  std::vector<float>* x = nullptr;
  const float* negative_kv = nullptr;
  std::vector<float>* x0 = nullptr;
  StepCache* cache = nullptr;
  LoraTerms lora;  // Its adapters (each item its own).
};
// DenoiseStep for every item (jobs at any step of their own schedules, each
// with its own condition, guidance and step cache). With `batched`, the
// denoiser's blocks run once over every branch of every item that runs
// them (Denoiser::BlocksBatch: each item's result within float32 rounding
// of DenoiseStep's, not bit for bit); without, per branch, bit-identical
// to DenoiseStep. REQUIRES: every item's latent shape the same.
void DenoiseSteps(std::span<SampleStep> items, bool batched = true);

// Image edits (img2img) and videos from a reference picture. The picture
// rgb [height][width][3] (uint8) scaled (media::ResizeRgb) to r.width ×
// r.height, extended to the latent cells' size by repeating its last row
// and column, and encoded by the VAE's encoder: z0 [kLatentChannels, 1,
// h, w]. REQUIRES width, height > 0.
std::vector<float> EncodePicture(const Request& r, const std::uint8_t* rgb, int width, int height);
// The first step an edit of `strength` (in (0, 1]) samples: steps −
// floor(strength · steps), at most steps − 1 (at least one step runs).
int EditStartStep(int steps, float strength);
// The latent an edit starts sampling from at step `start`: (1 − σ) z0 +
// σ ε with σ = 1 − start/steps (the flow's interpolation) and ε the seed's
// noise (InitialNoise); a video's every latent frame starts from z0 (one
// frame, EncodePicture's). REQUIRES z0 of r's latent frame size.
std::vector<float> EditStartLatent(const Request& r, const std::vector<float>& z0, int start);

// Which denoise steps make a preview: every r.preview_every steps and the
// last, but at most one per `min_interval` besides the last (a worker sends
// only the newest preview per heartbeat, so more would be encoded for
// nothing). Not thread-safe: one per denoise loop.
class PreviewSchedule {
 public:
  explicit PreviewSchedule(const Request& r,
                           std::chrono::milliseconds min_interval = std::chrono::milliseconds(100));
  // Whether step `done` (1-based) makes one; true records the time.
  bool Want(int done);

 private:
  int every_, steps_;
  std::chrono::steady_clock::duration min_interval_;
  std::optional<std::chrono::steady_clock::time_point> last_;
};

// Largest side of a preview, pixels.
inline constexpr int kMaxPreviewSide = 128;
// A preview of the clean latent x0 [kLatentChannels, t, h, w] (its first
// frame): each latent cell through the weights' linear latent→RGB map
// (preview.rgb), a pixel per cell, subsampled so neither side exceeds
// kMaxPreviewSide; PNG. Errors: kInternal (PNG encoding).
Result<std::string> PreviewPng(const std::vector<float>& x0, const LatentShape& s);

// Decodes output frames as latent frames arrive, in order. Frame 0 comes
// from latent frame 0; frames 4k−3..4k blend latent frames k−1 and k.
class FrameDecoder {
 public:
  explicit FrameDecoder(const Request& r);
  // Latent frame k (0, 1, ... in order) of `latent` [kLatentChannels, t,
  // h, w] has landed; decodes and encodes (PNG) the frames it completes.
  // Errors: kInternal (PNG encoding).
  Status AddLatentFrame(const float* latent, int k);
  std::size_t frames_done() const { return pngs_.size(); }
  // The result: one PNG ("image/png") or a frames archive of every frame.
  std::string Output() const;
  std::string OutputType() const;

 private:
  Status Emit(const std::vector<float>& z);
  Request r_;
  LatentShape s_;
  std::vector<float> prev_;
  std::vector<std::string> pngs_;
};

// Runs the three steps in one place (tests), with `lora` (the request's
// adapters, resolved by the caller).
Result<std::pair<std::string, std::string>> GenerateAll(const Request& r, LoraTerms lora = {});

}  // namespace sluice::reference

#endif  // SLUICE_RUNTIME_REFERENCE_PIPELINE_H_
