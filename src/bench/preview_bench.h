// `sluice bench preview`: what previews cost the reference denoiser. The
// same 128×128 job is denoised without previews and with preview_every 1
// as the denoise stage makes them (the guided x0 kept every step; mapped to
// RGB and PNG-encoded when PreviewSchedule says: at most one per 100 ms and
// the last step), alternating, in one process on one thread; the figure is
// the median job time with previews over the median without (the bound:
// ≤ 1.02).
#ifndef SLUICE_BENCH_PREVIEW_BENCH_H_
#define SLUICE_BENCH_PREVIEW_BENCH_H_

#include <cstddef>
#include <string>

#include "sluice/status.h"

namespace sluice::bench {

struct PreviewBenchOptions {
  int rounds = 9;  // Alternating pairs of jobs.
  int steps = 12;
  std::string size = "128x128";
};

struct PreviewBenchResult {
  PreviewBenchOptions options;
  double without_ms = 0;  // Median job time, no previews.
  double with_ms = 0;     // Median job time, a preview every step.
  double ratio = 0;       // with_ms / without_ms.
  double preview_us = 0;  // Median time of one preview (map + PNG).
  double previews_per_job = 0;
  // previews_per_job × preview_us over without_ms: the previews' own time
  // as a share of the job, steadier than the ratio on a busy machine.
  double cost_share = 0;
  std::size_t preview_bytes = 0;
  int preview_width = 0, preview_height = 0;
  bool same_latent = false;  // Both runs end on the same bytes.
};

// Errors: kInvalidArgument (a bad size or count).
Result<PreviewBenchResult> RunPreviewBench(const PreviewBenchOptions& o);
std::string ToJson(const PreviewBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_PREVIEW_BENCH_H_
