#include "bench/preview_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "media/png.h"
#include "runtime/reference/pipeline.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

Result<PreviewBenchResult> RunPreviewBench(const PreviewBenchOptions& o) {
  if (o.rounds < 1 || o.rounds > 1000 || o.steps < 1 || o.steps > 1000) {
    return InvalidArgumentError("rounds and steps: 1..1000");
  }
  const std::string req = R"({"prompt":"a large red circle on the left on a blue background",)"
                          R"("seed":1,"size":")" +
                          o.size + R"(","steps":)" + std::to_string(o.steps) + "}";
  SLUICE_ASSIGN_OR_RETURN(reference::Request r, reference::ParseRequest(req, o.steps, 4.0f));
  const std::vector<float> cond = reference::EncodeCondition(r);
  PreviewBenchResult out;
  out.options = o;
  std::vector<double> without, with, one;
  std::vector<float> x0, end_without, end_with;
  std::string png;
  int made = 0;
  for (int round = 0; round < o.rounds; ++round) {
    for (int pass = 0; pass < 2; ++pass) {
      const bool previews = (pass + round) % 2 == 1;  // Alternate which goes first.
      std::vector<float> x = reference::InitialNoise(r);
      const Clock::time_point t0 = Clock::now();
      reference::Request asked = r;
      asked.preview_every = 1;
      reference::PreviewSchedule schedule(asked);
      for (int step = 0; step < r.steps; ++step) {
        const bool make = previews && schedule.Want(step + 1);
        reference::DenoiseStep(r, cond.data(), step, x, nullptr, make ? &x0 : nullptr);
        if (make) {
          ++made;
          const Clock::time_point p0 = Clock::now();
          SLUICE_ASSIGN_OR_RETURN(png, reference::PreviewPng(x0, r.latent()));
          one.push_back(std::chrono::duration<double, std::micro>(Clock::now() - p0).count());
        }
      }
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      (previews ? with : without).push_back(ms);
      (previews ? end_with : end_without) = std::move(x);
    }
  }
  out.without_ms = Median(without);
  out.with_ms = Median(with);
  out.ratio = out.with_ms / out.without_ms;
  out.preview_us = Median(one);
  out.previews_per_job = static_cast<double>(made) / o.rounds;
  out.cost_share = out.previews_per_job * out.preview_us / 1000.0 / out.without_ms;
  out.preview_bytes = png.size();
  SLUICE_ASSIGN_OR_RETURN(media::RgbImage img, media::DecodePng(png));
  out.preview_width = img.width;
  out.preview_height = img.height;
  out.same_latent =
      end_with.size() == end_without.size() &&
      std::memcmp(end_with.data(), end_without.data(), end_with.size() * sizeof(float)) == 0;
  return out;
}

std::string ToJson(const PreviewBenchResult& r) {
  nlohmann::json j = {{"rounds", r.options.rounds},
                      {"steps", r.options.steps},
                      {"size", r.options.size},
                      {"without_ms", r.without_ms},
                      {"with_ms", r.with_ms},
                      {"ratio", r.ratio},
                      {"preview_us", r.preview_us},
                      {"previews_per_job", r.previews_per_job},
                      {"cost_share", r.cost_share},
                      {"preview_bytes", r.preview_bytes},
                      {"preview_width", r.preview_width},
                      {"preview_height", r.preview_height},
                      {"same_latent", r.same_latent}};
  return j.dump();
}

}  // namespace sluice::bench
