// sluice/runtime/profile_stages.h
//
// Profile stages: stand-ins for real models that take their timings and
// payload sizes from published figures (shared WORKLOADS.md: Wan2.1,
// HunyuanVideo, FLUX, Qwen-Image), scaled by a time factor, and move real
// bytes of the real sizes through the connector. For benchmarks at
// realistic ratios without GPUs. Each stage's handler spends
// time × time_factor (sleeping, in step-sized slices for denoise so cancel
// and checkpoint requests are honoured) and publishes a payload of the
// model's size.

#ifndef SLUICE_RUNTIME_PROFILE_STAGES_H_
#define SLUICE_RUNTIME_PROFILE_STAGES_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "sluice/cache/cache.h"
#include "sluice/cache/condition.h"
#include "sluice/connector/connector.h"
#include "sluice/runtime/model_profiles.h"
#include "sluice/runtime/stage_worker.h"

namespace sluice {

// The lease for a worker of `stage` of `p` at `time_factor`: ten times
// what one unit of its work takes (a denoise step; a whole encode or
// decode), and at least 30 s, so a noisy host never trips it while a hung
// worker is found in well under the orchestrator's default (10 min).
std::chrono::milliseconds ProfileLease(const ModelProfile& p, std::string_view stage,
                                       double time_factor);

// The handler for `stage` of `profile`. `connector` (store or p2p mode)
// moves the payloads and must outlive the handler; `time_factor` scales
// every timing (0 < factor <= 1). A request whose "model" names a known
// profile runs that profile instead (mixed workloads on one pool). Denoise
// honours the request's "steps" when given. Decode returns a PNG of the
// request's "size" (videos: a frames archive of its "frames"), one colour,
// padded to `encoded_bytes()`.
//
// `latent_chunks` > 1: a video's denoise hands its latent over in that many
// chunks along its latent frames (at most one per frame), and its decode
// works through each chunk as it lands (its time in proportion to the
// chunk's frames), its first output after the first chunk — benchmark (b)
// in `sluice bench e2e`. Images, and 1, hand the latent over whole and
// decode it whole, the first output after kFirstOutputShare of it.
//
// With `caches.conditions`, encode goes through the condition cache as the
// reference encode does: each text of the request (prompt, negative
// prompt) has a stand-in embedding of the profile's condition shape under
// its key from ProfileConditionEncoder, computed only on a miss (half the
// profile's encode time per text), and denoise is handed a cached input
// naming the entries. Denoise reads a cached input through `caches.store`;
// an entry it cannot read fails the stage with kNotFound (the orchestrator
// runs encode again). Both must outlive the handler.
struct ProfileCaches {
  cache::Cache* conditions = nullptr;  // Encode.
  StoreClient* store = nullptr;        // Denoise.
};
StageHandler ProfileStageHandler(const ModelProfile& profile, const std::string& stage,
                                 DiffusionConnector* connector, double time_factor,
                                 int latent_chunks = 1, ProfileCaches caches = {});

// The stand-in text encoder of profile `p`'s stages: id
// "sluice-profile-text", version 1, the profile's name, condition shape
// and dtype (bf16) as parameters, fields prompt and negative_prompt. An
// encode worker with a condition cache declares it, so jobs whose texts
// are all cached skip encode.
cache::ConditionEncoder ProfileConditionEncoder(const ModelProfile& p);

// All three stages of a job in turn on one worker (colocated serving): the
// same timings without payload transfers. Like a colocated stack, a job
// runs as one unit: it does not yield to preemption. (The disaggregated
// denoise stage yields at a step boundary when asked to checkpoint.)
StageHandler ProfileColocatedHandler(const ModelProfile& profile, double time_factor);

}  // namespace sluice

#endif  // SLUICE_RUNTIME_PROFILE_STAGES_H_
