#include "sim/workloads.h"

#include <algorithm>
#include <cmath>

namespace sluice::sim {
namespace {

namespace orch = ::sluice::orchestrator;

std::uint64_t Bf16Bytes(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 2;
  for (std::int64_t d : shape) {
    n *= static_cast<std::uint64_t>(d);
  }
  return n;
}

}  // namespace

ModelProfile SimProfile(const ::sluice::ModelProfile& p, double time_factor, bool exact) {
  const double work_cv = exact ? 0 : 0.2;
  ModelProfile m;
  m.name = p.name;
  m.video = p.video;
  m.colocated_peak_gb = p.colocated_peak_gb;
  m.over_memory_decode_factor = p.over_memory_decode_factor;
  StageProfile encode, denoise, decode;
  encode.name = "encode";
  encode.service = {p.encode_s * time_factor, work_cv};
  encode.output_bytes = Bf16Bytes(p.condition_shape);
  denoise.name = "denoise";
  denoise.kind = orch::StageKind::kAdmission;
  denoise.service = {p.steps * p.step_s * time_factor, exact ? 0 : 0.05};
  denoise.output_bytes = Bf16Bytes(p.latent_shape);
  denoise.steps = p.steps;
  decode.name = "decode";
  decode.service = {p.decode_s * time_factor, work_cv};
  decode.output_bytes = p.encoded_bytes();
  decode.first_output_fraction = ::sluice::kFirstOutputShare;
  m.stages = {encode, denoise, decode};
  return m;
}

Result<ModelProfile> BuiltinModel(const std::string& name) {
  Result<::sluice::ModelProfile> p = ::sluice::FindModelProfile(name);
  if (!p.ok()) {
    return InvalidArgumentError("sim: " + std::string(p.status().message()));
  }
  ModelProfile m = SimProfile(*p);
  // Published batch curves of a profile's denoise, where one is: Qwen-Image
  // at 1024x1024 on one H200 (torch.compile, 50 steps): 4.11, 4.22 and
  // 4.22 images/s at batches of 1, 2 and 3 (SGLang PR #22183, "Batch Size
  // Benchmark"; compute-bound at batch 1). None is published for the
  // others: their denoise pools run one job per slot.
  if (name == "qwen-image-1024") {
    m.stages[AdmissionStage(m)].batch_gain = {1.0, 4.22 / 4.11};
  }
  return m;
}

ModelProfile FluxImageProfile() {
  return *BuiltinModel("flux-1024");
}

ModelProfile WanVideoProfile() {
  return *BuiltinModel("wan2.1-480p");
}

double ColocatedDecodePenalty(const ModelProfile& m, double gpu_memory_gb) {
  return m.colocated_peak_gb > gpu_memory_gb ? m.over_memory_decode_factor : 1.0;
}

ModelProfile Colocated(const ModelProfile& m) {
  return Colocated(m, ColocatedDecodePenalty(m, ::sluice::kDefaultGpuMemoryGb));
}

ModelProfile Colocated(const ModelProfile& m, double decode_penalty) {
  ModelProfile c;
  c.name = m.name;
  c.video = m.video;
  StageProfile all;
  all.name = "denoise";
  all.kind = orch::StageKind::kAdmission;
  double before_last = 0, last = 0;
  for (std::size_t i = 0; i < m.stages.size(); ++i) {
    const StageProfile& s = m.stages[i];
    const bool is_last = i + 1 == m.stages.size();
    const double t = s.service.mean_s * (is_last ? decode_penalty : 1.0);
    (is_last ? last : before_last) += t;
    if (s.kind == orch::StageKind::kAdmission) {
      all.steps = s.steps;
      all.service.cv = s.service.cv;
    }
  }
  all.service.mean_s = before_last + last;
  all.first_output_fraction =
      (before_last + last * m.stages.back().first_output_fraction) / all.service.mean_s;
  const std::size_t a = AdmissionStage(m);
  if (a < m.stages.size() && !m.stages[a].batch_gain.empty()) {
    const double batched = m.stages[a].service.mean_s;
    const double other = all.service.mean_s - batched;
    for (double g : m.stages[a].batch_gain) {
      all.batch_gain.push_back(all.service.mean_s / (other + batched / g));
    }
  }
  c.stages = {all};
  return c;
}

std::size_t AdmissionStage(const ModelProfile& m) {
  for (std::size_t s = 0; s < m.stages.size(); ++s) {
    if (m.stages[s].kind == orch::StageKind::kAdmission) {
      return s;
    }
  }
  return m.stages.size();
}

std::vector<PoolSize> SplitPools(const ModelProfile& m, int gpus) {
  double total = 0;
  for (const StageProfile& s : m.stages) {
    total += s.service.mean_s;
  }
  std::vector<PoolSize> pools;
  int used = 0;
  std::size_t denoise = 0;
  for (std::size_t i = 0; i < m.stages.size(); ++i) {
    const StageProfile& s = m.stages[i];
    const int g = std::max(1, static_cast<int>(std::lround(gpus * s.service.mean_s / total)));
    pools.push_back({m.name, s.name, g, 1, {}});
    used += g;
    if (s.kind == orch::StageKind::kAdmission) {
      denoise = i;
    }
  }
  pools[denoise].gpus = std::max(1, pools[denoise].gpus + gpus - used);
  return pools;
}

SimConfig OneModel(const ModelProfile& m, const std::vector<int>& gpus,
                   orch::PriorityClass priority, double rate_per_s, double hours,
                   std::uint64_t seed, int admission_batch) {
  SimConfig c;
  c.models = {m};
  c.duration_s = hours * 3600;
  c.seed = seed;
  for (std::size_t s = 0; s < m.stages.size() && s < gpus.size(); ++s) {
    const bool admission = m.stages[s].kind == orch::StageKind::kAdmission;
    c.pools.push_back({m.name, m.stages[s].name, gpus[s], admission ? admission_batch : 1, {}});
    if (admission && s + 1 < m.stages.size() && s + 1 < gpus.size()) {
      // Every slot of the admission pool may hold a reservation downstream.
      c.admission_overcommit =
          std::ceil(static_cast<double>(gpus[s]) * admission_batch / gpus[s + 1]);
    }
  }
  c.arrivals = {{m.name, priority, rate_per_s}};
  return c;
}

Result<SimConfig> BuiltinWorkload(const std::string& workload, int gpus, double hours, double load,
                                  std::uint64_t seed, bool colocated, double gpu_memory_gb) {
  std::vector<std::pair<ModelProfile, orch::PriorityClass>> models;
  if (workload == "image") {
    models = {{FluxImageProfile(), orch::PriorityClass::kInteractive}};
  } else if (workload == "video") {
    models = {{WanVideoProfile(), orch::PriorityClass::kStandard}};
  } else if (workload == "mixed") {
    models = {{FluxImageProfile(), orch::PriorityClass::kInteractive},
              {WanVideoProfile(), orch::PriorityClass::kBatch}};
  } else {
    return InvalidArgumentError("sim: workload '" + workload + "': image, video or mixed");
  }
  if (gpus < 3 * static_cast<int>(models.size())) {
    return InvalidArgumentError("sim: " + std::to_string(gpus) + " GPUs: at least 3 per model");
  }
  if (!(load > 0 && load <= 2) || !(hours > 0)) {
    return InvalidArgumentError("sim: load must be in (0, 2] and hours > 0");
  }
  if (!(gpu_memory_gb > 0 && gpu_memory_gb <= 4096)) {
    return InvalidArgumentError("sim: GPU memory must be in (0, 4096] GB");
  }
  SimConfig c;
  c.duration_s = hours * 3600;
  c.seed = seed;
  int left = gpus;
  for (std::size_t i = 0; i < models.size(); ++i) {
    const int share = i + 1 == models.size() ? left : gpus / static_cast<int>(models.size());
    left -= share;
    const ModelProfile& m = models[i].first;
    // Each model as OneModel has it, on its share split by demand, at the
    // rate that keeps its admission pool at `load`; then side by side.
    std::vector<int> split;
    double rate = 0;
    for (const PoolSize& p : SplitPools(m, share)) {
      split.push_back(p.gpus);
    }
    for (std::size_t s = 0; s < m.stages.size(); ++s) {
      if (m.stages[s].kind == orch::StageKind::kAdmission) {
        rate = load * split[s] / m.stages[s].service.mean_s;
      }
    }
    const SimConfig one = colocated
                              ? OneModel(Colocated(m, ColocatedDecodePenalty(m, gpu_memory_gb)),
                                         {share}, models[i].second, rate, hours, seed)
                              : OneModel(m, split, models[i].second, rate, hours, seed);
    c.models.insert(c.models.end(), one.models.begin(), one.models.end());
    c.pools.insert(c.pools.end(), one.pools.begin(), one.pools.end());
    c.arrivals.insert(c.arrivals.end(), one.arrivals.begin(), one.arrivals.end());
    c.admission_overcommit = std::max(c.admission_overcommit, one.admission_overcommit);
  }
  return c;
}

}  // namespace sluice::sim
