#include "bench/step_cache_bench.h"

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "runtime/reference/pipeline.h"
#include "runtime/reference/scenes.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace ref = sluice::reference;

constexpr int kSize = 128;  // The size the reference model was trained at.

// One scene's output at `threshold` (0: no cache): its pixels, the denoise
// loop's time and the steps that skipped the blocks.
struct Sample {
  std::vector<std::uint8_t> rgb;
  double ms = 0;
  int skipped = 0;
};

Result<Sample> Generate(const ref::Request& r, const std::vector<float>& cond, float threshold) {
  Sample out;
  std::vector<float> x = ref::InitialNoise(r);
  ref::StepCache cache;
  cache.threshold = threshold;
  const Clock::time_point t0 = Clock::now();
  for (int step = 0; step < r.steps; ++step) {
    ref::DenoiseStep(r, cond.data(), step, x, nullptr, nullptr, &cache);
  }
  out.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  out.skipped = cache.skipped;
  ref::FrameDecoder dec(r);
  SLUICE_RETURN_IF_ERROR(dec.AddLatentFrame(x.data(), 0));
  SLUICE_ASSIGN_OR_RETURN(media::RgbImage img, media::DecodePng(dec.Output()));
  out.rgb = std::move(img.rgb);
  return out;
}

double Adherence(const ref::Scene& s, const std::vector<std::uint8_t>& rgb) {
  const ref::Analysis a =
      ref::AnalyseImage(rgb.data(), kSize, kSize, std::max(2, static_cast<int>(s.objects.size())));
  const ref::SceneMarks m = ref::ScoreScene(s, a);
  return (m.color + m.shape + m.background + m.position.value_or(0)) / 4.0;
}

}  // namespace

Result<StepCacheBenchResult> RunStepCacheBench(const StepCacheBenchOptions& o) {
  if (o.prompts < 1 || o.prompts > 1000 || o.steps < 1 || o.steps > 1000) {
    return InvalidArgumentError("prompts and steps: 1..1000");
  }
  if (!(o.guidance >= 0 && o.guidance <= 30)) {
    return InvalidArgumentError("guidance: 0..30");
  }
  if (o.thresholds.empty() || o.thresholds.size() > 8) {
    return InvalidArgumentError("thresholds: 1 to 8 of them");
  }
  for (float t : o.thresholds) {
    if (!(t > 0 && t <= ref::StepCache::kMaxThreshold)) {
      return InvalidArgumentError("thresholds: each in (0, " +
                                  std::to_string(ref::StepCache::kMaxThreshold) + "], got " +
                                  std::to_string(t));
    }
  }
  SLUICE_ASSIGN_OR_RETURN(ref::SceneSplit split, ref::ParseSceneSplit(o.split));
  StepCacheBenchResult out;
  out.options = o;
  out.cached.resize(o.thresholds.size());
  std::vector<StepCacheFigures*> all = {&out.baseline};
  for (std::size_t i = 0; i < o.thresholds.size(); ++i) {
    out.cached[i].threshold = o.thresholds[i];
    all.push_back(&out.cached[i]);
  }
  const std::vector<ref::Scene> scenes = ref::DrawScenes(o.seed, o.prompts, split, false);
  for (std::size_t k = 0; k < scenes.size(); ++k) {
    ref::Request r;
    r.prompt = scenes[k].Caption();
    r.width = r.height = kSize;
    r.seed = static_cast<std::int64_t>(k);
    r.steps = o.steps;
    r.guidance = o.guidance;
    const std::vector<float> cond = ref::EncodeCondition(r);
    if (k == 0) {
      SLUICE_RETURN_IF_ERROR(Generate(r, cond, 0).status());  // Warm-up, not counted.
    }
    // Each setting goes first in turn, so a slower stretch of the machine
    // falls on each alike.
    std::vector<Sample> samples(all.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
      const std::size_t at = (i + k) % all.size();
      SLUICE_ASSIGN_OR_RETURN(samples[at], Generate(r, cond, all[at]->threshold));
    }
    const std::vector<std::uint8_t>& base = samples[0].rgb;
    for (std::size_t i = 0; i < all.size(); ++i) {
      StepCacheFigures* f = all[i];
      const Sample& s = samples[i];
      f->denoise_ms += s.ms;
      f->skipped_share += s.skipped;
      f->accuracy += Adherence(scenes[k], s.rgb);
      double diff = 0;
      for (std::size_t p = 0; p < s.rgb.size(); ++p) {
        diff += std::abs(static_cast<int>(s.rgb[p]) - static_cast<int>(base[p]));
      }
      f->mean_abs_pixel += diff / static_cast<double>(s.rgb.size());
    }
  }
  const double n = static_cast<double>(scenes.size());
  for (StepCacheFigures* f : all) {
    f->skipped_share /= n * o.steps;
    f->accuracy /= n;
    f->mean_abs_pixel /= n;
    f->speedup = f->denoise_ms > 0 ? out.baseline.denoise_ms / f->denoise_ms : 0;
    f->accuracy_drop = out.baseline.accuracy - f->accuracy;
  }
  return out;
}

std::string ToJson(const StepCacheBenchResult& r) {
  auto figures = [](const StepCacheFigures& f) {
    return nlohmann::json{{"threshold", f.threshold},
                          {"denoise_ms", f.denoise_ms},
                          {"speedup", f.speedup},
                          {"skipped_share", f.skipped_share},
                          {"accuracy", f.accuracy},
                          {"accuracy_drop", f.accuracy_drop},
                          {"mean_abs_pixel", f.mean_abs_pixel}};
  };
  nlohmann::json cached = nlohmann::json::array();
  for (const StepCacheFigures& f : r.cached) {
    cached.push_back(figures(f));
  }
  return nlohmann::json{{"prompts", r.options.prompts},
                        {"split", r.options.split},
                        {"seed", r.options.seed},
                        {"steps", r.options.steps},
                        {"guidance", r.options.guidance},
                        {"baseline", figures(r.baseline)},
                        {"thresholds", cached}}
      .dump();
}

}  // namespace sluice::bench
