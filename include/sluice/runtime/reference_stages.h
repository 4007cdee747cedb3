// sluice/runtime/reference_stages.h
//
// Reference stages: real (small) diffusion models that run on the CPU with
// nothing downloaded, so `sluice serve` generates images and videos out of
// the box and tests can compare deployments byte for byte.
//   encode  — word-level tokenizer + 2-layer transformer: the prompt and the
//             negative prompt → condition [2, 64, 64] f32.
//   denoise — DiT-style model (2×2 patches, self- and cross-attention
//             blocks with timestep modulation) sampled by flow matching
//             (Euler, σ from 1 to 0) with classifier-free guidance over the
//             request's steps → latent [16, t, h, w] f32 (8× spatial, 4×
//             temporal compression; video latents published in t chunks).
//   decode  — VAE-style convolutional decoder, frame by frame as latent
//             chunks land → PNG (images) or a frames archive (videos).
// Weights come from a safetensors file (LoadReferenceWeights; by default
// the trained ones sluice ships, docs/models/sluice-reference.md). The same request gives the
// same bytes in every deployment (disaggregated, colocated, any thread
// count): each stage computes on one thread with one-thread BLAS calls.
//
// A denoise input may be a cached input (sluice/cache/condition.h) naming
// the two texts' embeddings [64, 64] f32 in the store (an encode stage with
// a condition cache, or the orchestrator skipping encode on a hit); an
// entry gone or unreadable by then fails the stage with kNotFound, and the
// orchestrator runs encode again.
//
// Request fields (the orchestrator's JSON): prompt, negative_prompt, size
// "WxH" (16..2048, at most 4096 latent tokens), seed, steps, guidance,
// preview_every, step_cache {"threshold": 0..1}, lora [{"name", "scale",
// "digest"}]; videos: frames, fps.

#ifndef SLUICE_RUNTIME_REFERENCE_STAGES_H_
#define SLUICE_RUNTIME_REFERENCE_STAGES_H_

#include <chrono>
#include <string>
#include <string_view>

#include "sluice/adapters.h"
#include "sluice/cache/cache.h"
#include "sluice/cache/condition.h"
#include "sluice/connector/connector.h"
#include "sluice/runtime/stage_worker.h"
#include "sluice/store/client.h"

namespace sluice {

// The model the reference stages serve (and `sluice serve`'s default).
inline constexpr std::string_view kReferenceModelName = "sluice-reference";
// The size the shipped weights were trained at (images and video frames):
// its workers declare it, so a request without a size gets it.
inline constexpr std::string_view kReferenceTrainedSize = "128x128";

struct ReferenceStageOptions {
  int default_steps = 12;  // When the request names none.
  float default_guidance = 4.0f;
  // Denoise: store the sampler state every k steps (0: only when asked to
  // checkpoint for preemption). A lost or preempted job resumes from the
  // latest one on any denoise worker. Needs `store`.
  int checkpoint_every = 0;
  // Where checkpoints go and cached inputs are read from; null: no
  // checkpoints, and a cached input fails the stage. Must outlive the
  // handler.
  StoreClient* store = nullptr;
  // Encode: each text's embedding (prompt and negative prompt apart) goes
  // through this cache under its condition key (ReferenceConditionEncoder),
  // computed only on a miss, and denoise gets a cached input naming both
  // entries instead of a payload. Null: encode publishes the condition.
  // Must outlive the handler.
  cache::Cache* condition_cache = nullptr;
  // Denoise, CFG branch sharing (opt-in): the unconditional branch's
  // cross-attention keys and values, which depend on the negative prompt
  // alone and are the same at every step, go through this cache under a
  // feature key (namespace sluice.reference.dit: model, version, the
  // negative prompt's condition key), so every request with that negative
  // prompt reuses them; output bytes are identical with and without. Best
  // effort: a cache that fails is logged and the keys computed here.
  // Null: computed at every step. Must outlive the handler.
  cache::Cache* feature_cache = nullptr;
  // Denoise: the step cache's threshold for a request that names none
  // (step_cache {"threshold": t}), in 0..1; 0: off. A step whose
  // modulated input moved less than this since the last full step runs
  // none of the denoiser's blocks (pipeline.h's StepCache); the stage
  // counts "steps" and "steps_skipped" on its Done.
  float step_cache_threshold = 0;
  // Denoise: the LoRA adapters a request names ("lora": [{"name", "scale",
  // "digest"}]) are read from `store` (where the orchestrator put each file
  // when it was registered) on first use and kept in memory, the least
  // recently used dropped once they pass this many bytes.
  std::size_t adapter_cache_bytes = std::size_t{256} << 20;
  // Denoise: step-level batching. With k > 1, the worker's concurrent
  // jobs (up to its capacity) hand each step to one batcher, which runs
  // the steps of up to k jobs that arrive within a few milliseconds as one
  // batch (the denoiser's products over all their tokens at once); each
  // job keeps its own loop, checkpoints, previews and cancellation, and
  // joins or leaves at a step boundary. A step run with others is within
  // float32 rounding of it alone, not bit for bit. The job counts
  // "steps_batched" (its steps that shared a batch). 1: every job alone;
  // 1..64.
  int denoise_batch = 1;
  // Denoise with denoise_batch > 1: an interactive job
  // (StageContext::interactive) steps outside the batch, alone — its steps
  // are DenoiseStep's bit for bit and wait on no other job's — for
  // hardware where a batch costs each member more than a step alone does
  // (a CPU: a batch of n costs about n steps; a GPU: about one). Its Done
  // counts "steps_batched" 0.
  bool interactive_alone = false;
  // Checkpoints of jobs nobody resumes expire after this.
  std::chrono::seconds checkpoint_ttl{600};
};

// Loads the reference models' weights for this process: a safetensors
// file, "random:SEED" (random networks, for tests of other sizes), or ""
// (the shipped weights). Call before serving; a second call with the same
// argument is a no-op. Errors: kNotFound (no such file), kInvalidArgument
// naming the file, the tensor and what is wrong (truncated, header over
// its cap or not a JSON object, a dtype other than F32, offsets past the
// end or overlapping, a missing, unexpected or misshapen tensor, a value
// not finite), kFailedPrecondition (other weights already in use).
Status LoadReferenceWeights(const std::string& weights);

// The reference text encoder as encode workers declare it: its id and
// version (the loaded weights' identity: workers on other weights declare
// another encoder), the parameters that shape its output, and the request
// fields it encodes (prompt, then negative_prompt). Its condition keys are what
// ReferenceStageOptions::condition_cache stores the embeddings under.
cache::ConditionEncoder ReferenceConditionEncoder();

// The store key of a reference denoise's sampler state after `step` of the
// request (docs/design/cache-keys.md, kind ckpt: model sluice-reference version 1,
// sampler flow_euler_cfg, seed, guidance as a float widened to double, the
// condition keys of prompt and negative prompt, steps, step, latent shape
// [16, t, h, w], f32), so any worker finds another's checkpoint.
// Errors: kInvalidArgument (a bad request; step outside 1..steps-1).
Result<std::string> ReferenceCheckpointKey(std::string_view request_json, int step,
                                           const ReferenceStageOptions& options = {});

// Checks `bytes` is an adapter of the reference model (runtime/reference/
// adapter.h: the format, the base weights' architecture, every tensor's
// shape). Errors: kInvalidArgument naming what does not fit.
Result<AdapterFacts> CheckReferenceAdapter(std::string bytes);

// The handler for `stage` (encode | denoise | decode). `connector` (store
// mode, or p2p: then a producer's slot is held until its consumer read the
// payload) moves payloads between stages and must outlive the handler.
// Errors: kInvalidArgument (unknown stage, bad options).
Result<StageHandler> ReferenceStageHandler(const std::string& stage, DiffusionConnector* connector,
                                           const ReferenceStageOptions& options = {});

// One handler running encode, denoise and decode of a job in turn, for the
// colocated deployment (the orchestrator's job pipeline is the denoise
// stage alone). Same bytes as the three stages. Like a colocated stack, a
// job runs as one unit: it writes periodic checkpoints (so a lost worker's
// job resumes) but does not yield to preemption. Errors: kInvalidArgument.
Result<StageHandler> ReferenceColocatedHandler(const ReferenceStageOptions& options = {});

}  // namespace sluice

#endif  // SLUICE_RUNTIME_REFERENCE_STAGES_H_
