// Built-in workloads for the simulator, from the published figures for
// real models that the profile stages also use (model_profiles.h:
// per-step DiT latency, encoder and VAE-decode latency, latent and
// condition sizes), and a cluster of a given size split into pools by
// demand.
#ifndef SLUICE_SIM_WORKLOADS_H_
#define SLUICE_SIM_WORKLOADS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/runtime/model_profiles.h"
#include "sluice/status.h"

#include "sim/simulator.h"

namespace sluice::sim {

// `p` (a profile of sluice/runtime/model_profiles.h, the table the
// profile stages spend) as the simulator models it: encode, denoise (an
// admission stage of p.steps checkpointable steps) and decode, each time
// scaled by `time_factor`; the condition and latent (bf16) cross the link
// to the next stage; the decode's first output after kFirstOutputShare of
// it. Service times vary as lognormals with cv 0.2 (encode, decode) and
// 0.05 (denoise), an assumption; 0 for both with `exact` (the profile
// stages sleep their times).
ModelProfile SimProfile(const ::sluice::ModelProfile& p, double time_factor = 1,
                        bool exact = false);
// FLUX.1-dev 1024², 28 steps (flux-1024): encode 52 ms, 0.139 s per step,
// decode 0.31 s; a 4 MiB condition, a 512 KiB latent.
ModelProfile FluxImageProfile();
// Wan2.1 T2V-14B 480p, 81 frames, 50 steps with CFG (wan2.1-480p): encode
// 0.89 s, 5.06 s per step, decode 2.4 s; a 4 MiB condition, a 4 MiB latent.
ModelProfile WanVideoProfile();
// SimProfile of the model_profiles.h profile named `name` (wan2.1-480p,
// wan2.1-720p, hunyuan-720p, flux-1024, qwen-image-1024). Errors:
// kInvalidArgument naming the known ones.
Result<ModelProfile> BuiltinModel(const std::string& name);

// What the colocated cost of `m`'s decode is, relative to a decode alone
// on its GPU, on a GPU of `gpu_memory_gb`: where the model's colocated
// peak (encoder, DiT weights and activations, VAE decode at once) exceeds
// it, the profile's over_memory_decode_factor — the DiT is offloaded or
// the decode runs tiled (a stated assumption of the profile, not a
// measurement); else 1.
double ColocatedDecodePenalty(const ModelProfile& m, double gpu_memory_gb);

// `m` run colocated: one admission stage ("denoise", so a worker holds
// the job from encode to decode) whose service is every stage's in turn,
// the decode's times `decode_penalty` (without it: ColocatedDecodePenalty
// on a GPU of kDefaultGpuMemoryGb); its first output comes once the
// decode has produced its first frames. Where `m`'s admission stage
// batches, so does the colocated stage, its other stages' work not: n
// jobs gain S / (S_other + S_admission / g(n)) over one alone (S their
// service in all, g the admission stage's curve).
ModelProfile Colocated(const ModelProfile& m);
ModelProfile Colocated(const ModelProfile& m, double decode_penalty);

// `gpus` GPUs split over `m`'s stages by mean service time, at least one
// each (the admission pool takes what rounding leaves); one slot per GPU.
std::vector<PoolSize> SplitPools(const ModelProfile& m, int gpus);

// `m` alone: gpus[s] GPUs for stage s (one slot each, but batches of
// `admission_batch` in the admission pool; a Colocated profile has one
// stage), Poisson arrivals of `priority` at `rate_per_s` for `hours`.
// Every slot of the admission pool may hold a reservation in the next
// pool (admission_overcommit). Not validated here: Simulate refuses a
// stage without GPUs or a rate not > 0.
SimConfig OneModel(const ModelProfile& m, const std::vector<int>& gpus,
                   orchestrator::PriorityClass priority, double rate_per_s, double hours,
                   std::uint64_t seed, int admission_batch = 1);

// The admission stage of `m` (its index), or m.stages.size() when none.
std::size_t AdmissionStage(const ModelProfile& m);

// `gpus` GPUs for `workload`: "image" (FLUX, interactive), "video" (Wan,
// standard) or "mixed" (half the GPUs each; images interactive, videos
// batch). Each model's GPUs are split over its stages by mean service
// time (at least one each); arrivals are Poisson at the rate that keeps
// its denoise pool at `load` utilization; admission_overcommit lets every
// denoise GPU hold a decode reservation. With `colocated`, each model's
// GPUs form one pool running every stage (Colocated), and the arrivals
// are the disaggregated run's: the two compare at equal GPUs and load; a
// colocated decode pays ColocatedDecodePenalty on GPUs of `gpu_memory_gb`.
// Errors: kInvalidArgument (an unknown workload, gpus below 3 per model,
// load outside (0, 2], hours not > 0, GPU memory outside (0, 4096]).
Result<SimConfig> BuiltinWorkload(const std::string& workload, int gpus, double hours, double load,
                                  std::uint64_t seed, bool colocated = false,
                                  double gpu_memory_gb = ::sluice::kDefaultGpuMemoryGb);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_WORKLOADS_H_
