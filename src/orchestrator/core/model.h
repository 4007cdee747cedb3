// Models and their pipelines, as the scheduler core sees them. A model is a
// name and its stages in order; each stage is a work queue (any worker of
// the pool takes the next item) or an admission queue (an admitted job stays
// on its worker until it finishes, holds a slot reserved in the next stage
// for its output, checkpoints, and may be preempted). Stage names are
// free-form identifiers: "encode", "denoise", "decode", "upscale",
// "safety", ... What a stage does is the workers' business.
#ifndef SLUICE_ORCHESTRATOR_CORE_MODEL_H_
#define SLUICE_ORCHESTRATOR_CORE_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/status.h"

namespace sluice::orchestrator {

enum class StageKind : std::uint8_t { kWork = 0, kAdmission = 1 };

struct StageDecl {
  std::string name;
  StageKind kind = StageKind::kWork;
  // What the stage counts toward a job's progress (PipelineProgress):
  // 1..kMaxProgressWeight, or 0 for its kind's default (kWorkWeight,
  // kAdmissionWeight). A model whose loop is short beside a long decode
  // (a video model) declares so here.
  int progress_weight = 0;
  bool operator==(const StageDecl&) const = default;
};

struct ModelSpec {
  std::string name;
  std::vector<StageDecl> stages;
  bool operator==(const ModelSpec&) const = default;
};

inline constexpr std::size_t kMaxStages = 16;
inline constexpr std::size_t kMaxNameLength = 64;
// The largest preview a worker sends with its progress (a small PNG of a
// denoising job's current prediction); larger ones are dropped by the
// worker and refused by the orchestrator.
inline constexpr std::size_t kMaxPreviewBytes = 64 * 1024;
// A stage's timings on its Done (DoneRequest.timings_ms): at most
// kMaxTimings, each under a name IsTimingName accepts and 0..kMaxTimingMs.
// The worker sends its own "start" and "run"; a handler adds the rest.
// Others are dropped by the worker and by the orchestrator.
inline constexpr std::size_t kMaxTimings = 8;
inline constexpr double kMaxTimingMs = 1e7;
// 1..32 of [a-z_].
bool IsTimingName(std::string_view name);
// A stage's counts on its Done (DoneRequest.counts): at most kMaxCounts,
// each under a name IsTimingName accepts and 0..kMaxCount. Others are
// dropped by the worker and by the orchestrator.
inline constexpr std::size_t kMaxCounts = 8;
inline constexpr std::int64_t kMaxCount = 1'000'000'000'000;
// What a worker holds after a run (DoneRequest.held): at most
// kMaxHeldLabels labels (the scheduler's learned labels per worker) of
// 1..kMaxHeldLabelBytes. Others are dropped by the worker and by the
// orchestrator.
inline constexpr std::size_t kMaxHeldLabels = 16;
inline constexpr std::size_t kMaxHeldLabelBytes = 128;

// encode (work) -> denoise (admission) -> decode (work): the pipeline of
// the reference and profile models, and of a worker that declares none.
std::vector<StageDecl> StandardPipeline();

// The stages a deployment treats apart, found from the declared kinds, not
// from names: `loop`, the admission stage (the denoising loop: steps,
// checkpoints, CFG branch sharing); `condition`, the stage just before it
// (it computes the condition the condition cache keeps); `output`, the
// last stage after it (it writes the result: its slots batch, its first
// chunk is the job's first output). Each is empty where the pipeline has
// none: no admission stage, or one that is first or last.
struct PipelineRoles {
  std::string condition, loop, output;
};
PipelineRoles RolesOf(const std::vector<StageDecl>& stages);
// RolesOf(StandardPipeline()): encode, denoise, decode.
const PipelineRoles& StandardRoles();

// What each stage counts toward a job's progress: its declared weight, by
// default by its kind (an admission stage, a denoising loop, weighs
// kAdmissionWeight; a work stage kWorkWeight). An admission stage counts by
// its steps; a work stage counts once it is done.
inline constexpr int kWorkWeight = 1;
inline constexpr int kAdmissionWeight = 8;
inline constexpr int kMaxProgressWeight = 1000;
// The stage's declared progress_weight, or its kind's default.
int ProgressWeight(const StageDecl& stage);
// How far a job is through `stages`, 0..1, while it is in `stage` at
// `step` of `steps`: the stages before it whole, plus `stage`'s steps done
// if it is an admission stage. A stage not in `stages` counts as the
// first. For StandardPipeline: encode 0, denoise 0.1..0.9, decode 0.9.
double PipelineProgress(const std::vector<StageDecl>& stages, std::string_view stage, int step,
                        int steps);

// Errors (kInvalidArgument, naming what is wrong): a stage name that is
// not 1..64 of [a-z0-9_-] starting with a letter or digit; a repeated
// stage; a progress weight outside 0..kMaxProgressWeight.
Status ValidateStageName(std::string_view stage);
// A model name: 1..64 of [A-Za-z0-9._:/-], starting with a letter or digit
// (Hugging Face style "org/name" and versions like "wan2.1-480p" pass).
Status ValidateModelName(std::string_view model);
// A picture size "WIDTHxHEIGHT" (a request's "size", a model's default
// sizes): (width, height), each 64..2048 and a multiple of 8. Errors:
// kInvalidArgument saying that.
Result<std::pair<int, int>> ParseSize(std::string_view size);
// A worker's declared default sizes (empty: none declared), each as
// ParseSize takes it. Errors: kInvalidArgument naming the field
// ("image_size: ..." or "video_size: ...").
Status ValidateDeclaredSizes(std::string_view image_size, std::string_view video_size);
// Name, 1..kMaxStages stages, each name valid and unique.
Status ValidateModel(const ModelSpec& m);

// "encode,denoise:admission,decode": a pipeline as text (config files,
// flags, the journal). Parse accepts "NAME" and "NAME:work" as work stages
// and "NAME:admission" as admission stages, each optionally followed by
// "@WEIGHT", its progress weight (1..kMaxProgressWeight:
// "encode@1,denoise:admission@4,decode@4"); errors name the bad entry.
// Format writes "@WEIGHT" only where one is declared.
std::string FormatPipeline(const std::vector<StageDecl>& stages);
Result<std::vector<StageDecl>> ParsePipeline(std::string_view text);

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_MODEL_H_
