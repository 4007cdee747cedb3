// `sluice bench e2e`: the RFC's benchmark (a) at small scale. An embedded
// deployment (disaggregated or colocated, equal total workers) serves an
// open-loop stream of jobs over its HTTP API; the run reports throughput,
// latency and time to first frame (TTFF) percentiles, the interactive
// jobs' p99 TTFF, and each pool's utilization.
//
// Workloads (`--workload`):
//   reference      reference models on the CPU: 256² images (interactive)
//                  and 320x192x17 videos (batch), 4:1 by count;
//   wan480-profile Wan2.1 480p videos (profile stages);
//   flux-profile   FLUX 1024² images (profile stages);
//   mixed          interactive FLUX images with batch Wan2.1 videos, 4:1 by
//                  count (profile stages) — the case where colocated
//                  serving suffers head-of-line blocking.
#ifndef SLUICE_BENCH_E2E_BENCH_H_
#define SLUICE_BENCH_E2E_BENCH_H_

#include <map>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::bench {

struct E2eBenchOptions {
  std::string workload = "mixed";
  std::string mode = "disagg";  // disagg | colocated
  int workers = 8;              // Total, equal in both modes.
  double rate = 4.0;            // Arrivals per second (Poisson, fixed seed).
  double duration_s = 10;       // Measured arrival window; the run waits for every job.
  // Arrivals before the measured window, served but not counted: every
  // worker's first jobs open connections and fault in buffers.
  double warmup_s = 2;
  double time_factor = 0.01;  // Profile workloads: published timings × this.
  // Disaggregated: where encode and decode run at equal worker count —
  // "shared": on every denoise worker (scheduled as their own stages);
  // "edge": on one worker of their own, the rest denoise;
  // "pools": `encode_workers` and `decode_workers` of their own, each
  // running one stage at a time as a GPU does (decode_slots 1), the rest
  // denoise — the N denoise : M decode split of benchmark (c).
  std::string light_stages = "shared";
  // Profile videos: the latent handed from denoise to decode in this many
  // chunks along its frames, decoded as they land (benchmark (b); 1: whole).
  int latent_chunks = 1;
  int encode_workers = 1;  // "pools" only.
  int decode_workers = 1;  // "pools" only.
  // Reference workload: step-level batching of up to this many jobs per
  // denoise worker (EmbeddedConfig::denoise_batch), 1..64; 1: off.
  int denoise_batch = 1;
};

struct E2eBenchResult {
  E2eBenchOptions options;
  int submitted = 0, succeeded = 0, failed = 0, rejected = 0;
  double seconds = 0;     // End of the warm-up to the last measured finish.
  double throughput = 0;  // Succeeded jobs per second.
  double p50_latency_s = 0, p99_latency_s = 0;
  double p50_ttff_s = 0, p99_ttff_s = 0;
  // Over the interactive jobs measured (the JSON prints null for none,
  // e.g. the flux-profile workload, whose jobs are all standard).
  double interactive_p99_ttff_s = 0;
  int interactive_jobs = 0;
  // Succeeded jobs without a first_output event (left out of the TTFF
  // figures): 0 since every succeeded job gets one.
  int jobs_without_first_output = 0;
  std::map<std::string, double> utilization;  // Pool → busy fraction.
  // p50 over the measured jobs of each stage's busy seconds (dispatch to
  // done), and of the time from the decode's start to the first output.
  std::map<std::string, double> stage_p50_s;
  double first_output_in_decode_p50_s = 0;
  // Per stage, the p50 over the measured jobs of each part of a stage's
  // time in ms (Timeline::stage_ms: queue, busy, overhead, and the
  // worker's start, run, input, output).
  std::map<std::string, std::map<std::string, double>> stage_breakdown_p50_ms;
};

// One job of a run's open-loop stream: when it is sent (seconds from the
// start), its index (what it asks for: E2eJobModel), and whether it falls
// in the warm-up.
struct PlannedJob {
  double at_s = 0;
  int index = 0;
  bool warmup = false;
};

// The run's arrivals: Poisson at o.rate from a fixed seed, through the
// warm-up and the measured window. The same options give the same list
// (the simulator replays it: e2e_sim.h).
std::vector<PlannedJob> PlanE2eArrivals(const E2eBenchOptions& o);

// The model job `index` of `workload` runs and whether it is interactive
// (else batch, or standard for single-model workloads).
struct E2eJobKind {
  std::string model;
  std::string priority;  // interactive | standard | batch
  bool video = false;
};
E2eJobKind E2eJobModel(const std::string& workload, int index);

// Errors: kInvalidArgument naming the bad option.
Status ValidateE2eOptions(const E2eBenchOptions& o);

Result<E2eBenchResult> RunE2eBench(const E2eBenchOptions& o);
std::string ToJson(const E2eBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_E2E_BENCH_H_
