// `sluice bench cache`: the caches of issue "cross-instance caches" on the
// embedded deployment (reference or profile stages). The same seeded job stream (N
// prompts drawn Zipf(s), K negative prompts drawn uniformly) runs three
// times on fresh deployments: without caches, with the condition cache,
// and with the condition cache and CFG branch sharing. It reports the
// condition hit rates per text field (looked up at submission), the encode
// pool's busy seconds per job and their ratio to the run without the cache,
// p50/p99 latency and throughput of each run, the denoise busy seconds per
// job with CFG sharing against without, and a job resumed from step k of N
// against the full job (denoise busy seconds).
#ifndef SLUICE_BENCH_CACHE_BENCH_H_
#define SLUICE_BENCH_CACHE_BENCH_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sluice/status.h"

namespace sluice::bench {

struct CacheBenchOptions {
  int prompts = 1000;    // Distinct prompts.
  double zipf = 1.1;     // Their popularity: P(i) ~ 1 / (i + 1)^zipf.
  int negatives = 4;     // Distinct negative prompts, uniform.
  int jobs = 200;        // Per run.
  double rate = 20;      // Arrivals per second (Poisson, fixed seed).
  int steps = 4;         // Denoise steps per job (64x64 images).
  int resume_step = 3;   // The resumed job starts here (of --resume-steps).
  int resume_steps = 8;  // The resumed job's total steps.
  // The stream again at 1..sweep_encode encode workers (0: no sweep),
  // with the cache on and off: for each, the fewest whose p99 TTFF stays
  // within 10% of the run with the most (the stand-in for unlimited encode
  // capacity).
  int sweep_encode = 0;
  // "reference" (real models on the CPU: every figure) or an image
  // profile's name (profile_stages.h: published timings × time_factor,
  // stand-in embeddings of the model's size; no CPU bound, so the encode
  // sweep is not at the mercy of a small host's cores; CFG sharing and
  // resume need the reference stages and are not run).
  std::string workload = "reference";
  double time_factor = 1.0;  // Profile workloads, in (0, 1].
  int denoise_workers = 2;   // 1..32.
};

struct CacheRun {
  int succeeded = 0, failed = 0;
  double encode_busy_per_job_s = 0, denoise_busy_per_job_s = 0;
  double p50_latency_s = 0, p99_latency_s = 0, throughput = 0;
  double p99_ttff_s = 0;
  int skipped_encode = 0;  // Jobs whose every condition was cached.
  // Per cache kind at the end of the run: the workers' counters (lookups,
  // hits, misses, computes, single_flight_waits, takeovers, bytes_inserted)
  // and the store's (objects, bytes, budget_bytes, evictions).
  std::map<std::string, std::map<std::string, double>> kinds;
  std::uint64_t soft_pins = 0;  // Cache entries the store soft-pinned.
};

struct CacheBenchResult {
  CacheBenchOptions options;
  CacheRun off, on, cfg;
  double prompt_hit_rate = 0, negative_hit_rate = 0;  // The `on` run, at submission.
  double encode_work_ratio = 0;                       // on / off encode busy per job.
  double cfg_denoise_ratio = 0;                       // cfg / on denoise busy per job.
  double resume_denoise_ratio = 0;  // Resumed from k of N / the full job's denoise busy.
  double resume_target = 0;         // (N - k) / N + 0.1.
  // (encode workers, p99 TTFF s), cache on and off; the fewest within 10%
  // of the most's (0: no sweep).
  std::vector<std::pair<int, double>> encode_sweep, encode_sweep_off;
  int fewest_encode_workers = 0, fewest_encode_workers_off = 0;
};

Result<CacheBenchResult> RunCacheBench(const CacheBenchOptions& o);
std::string ToJson(const CacheBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_CACHE_BENCH_H_
