// The cluster simulator: the orchestrator's own scheduler core
// (orchestrator/core/scheduler.h, the code the service runs) driven on a
// virtual clock by a discrete-event model of a cluster: pools of GPUs per
// (model, stage), per-stage service times drawn from lognormal
// distributions, payloads crossing links of a given bandwidth and latency,
// Poisson arrivals per class, and worker failures with repair. One thread,
// no I/O; the same config and seed give the same result.
//
// What it models of a stage: a dispatch occupies one slot of a worker for
// the input's transfer time (the previous stage's output over the link)
// plus a service time; an admission stage (denoise) resumed after a
// failure or preemption runs only its remaining steps. A job's time to
// first frame is when its last stage has produced `first_output_fraction`
// of its work (a chunked decode streams frames before it ends).
#ifndef SLUICE_SIM_SIMULATOR_H_
#define SLUICE_SIM_SIMULATOR_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sluice/status.h"

#include "orchestrator/core/model.h"
#include "orchestrator/core/policy.h"

namespace sluice::sim {

// A lognormal service time: its mean and coefficient of variation (0: the
// mean every time).
struct ServiceTime {
  double mean_s = 1;
  double cv = 0;
};

struct StageProfile {
  std::string name;
  orchestrator::StageKind kind = orchestrator::StageKind::kWork;
  ServiceTime service;
  std::uint64_t output_bytes = 0;  // Handed to the next stage over the link.
  int steps = 1;                   // Checkpointable steps (admission stages).
  // Share of the stage's service after which its first output exists (the
  // last stage: time to first frame). 1: only at the end.
  double first_output_fraction = 1;
  // Its input (the previous stage's output) arrives in this many slices
  // (a video latent chunked along T): the stage starts on the first and
  // works on slice j once it has arrived, so the rest of the transfer
  // overlaps its service. 1: the whole input first.
  int input_chunks = 1;
  // Batching (an admission stage only): batch_gain[k] is the throughput of
  // k + 1 jobs stepping together as one batch, relative to one job alone
  // (batch_gain[0] = 1; past the last entry the gain stays at it). A
  // worker of the stage's pool then runs up to its pool's `capacity` jobs
  // as one batch: with n running, each moves at batch_gain[n - 1] / n of
  // its speed alone, so a job joining or leaving changes every member's
  // end. Empty: the pool's slots run independently, each at full speed.
  // Jobs join at once (a real batch takes them at its next step boundary,
  // at most one step later).
  std::vector<double> batch_gain;
};

// The gain of a batch of `n` jobs on `gain` (see StageProfile::batch_gain):
// 0 for none; n when `gain` is empty (independent slots).
double BatchGain(const std::vector<double>& gain, int n);

struct ModelProfile {
  std::string name;
  std::vector<StageProfile> stages;
  bool video = false;
  // Colocated on one GPU: its peak memory (GB; 0: unknown, taken to fit)
  // and its decode's time factor when that exceeds the GPU's memory.
  double colocated_peak_gb = 0;
  double over_memory_decode_factor = 1;
};

struct PoolSize {
  std::string model, stage;
  int gpus = 1;      // Workers, one GPU each.
  int capacity = 1;  // Slots per worker (a batching stage: its largest batch).
  // Further models the same workers serve at this stage (one slot for
  // any of them, as a profile worker registered for every model does).
  std::vector<std::string> more_models;
};

// Jobs of one model and class arriving as a Poisson process, in bursts
// when asked: for the first `burst_s` of every `burst_every_s` seconds
// the rate is `burst_factor` times `rate_per_s`.
struct Arrivals {
  std::string model;
  orchestrator::PriorityClass priority = orchestrator::PriorityClass::kStandard;
  double rate_per_s = 1;
  double burst_factor = 1;  // >= 1; 1: no bursts.
  double burst_every_s = 0;
  double burst_s = 0;  // In (0, burst_every_s) with a factor above 1.
};

// One job of a trace: it arrives at `t_s`.
struct TracedJob {
  double t_s = 0;
  std::string model;
  orchestrator::PriorityClass priority = orchestrator::PriorityClass::kStandard;
  bool counted = true;  // false: served, but left out of the results (a warm-up).
};

struct SimConfig {
  std::vector<ModelProfile> models;
  std::vector<PoolSize> pools;
  std::vector<Arrivals> arrivals;
  // Jobs arriving at given times (sorted by t_s, none after duration_s),
  // beside any Poisson `arrivals`.
  std::vector<TracedJob> trace;
  double link_gbps = 100;  // Between any two workers (10^9 bit/s).
  // The store's memory for payloads between stages (0: unbounded). A
  // stage's output is held from the stage's end until the next stage is
  // done with it (as the orchestrator removes it); a stage whose output
  // does not fit keeps its GPU until enough is freed (its producer blocks
  // on the store), then finishes. Every stage output must fit on its own.
  double store_bytes = 0;
  double link_latency_us = 10;   // One way, per transfer.
  double duration_s = 3600;      // Arrivals stop here; the run drains after.
  double drain_limit_s = 86400;  // At most this long after, then unfinished jobs count as such.
  std::uint64_t seed = 1;
  // Worker failures: exponential with this mean per worker (0: none), each
  // back after `repair_s`.
  double mtbf_s = 0;
  double repair_s = 60;
  // The scheduler's SchedulerOptions::admission_overcommit: 0 admits a
  // denoise job only into a free, unreserved decode slot (at most as many
  // denoise jobs as decode slots); k > 0 lets k jobs per decode slot hold
  // reservations.
  double admission_overcommit = 0;
  // What the result keeps beyond percentiles (for plots): every job's
  // latency and TTFF, sorted; each pool's utilization per interval of
  // this many simulated seconds (0: none), sampled at the scheduler's
  // 1 s ticks.
  bool keep_samples = false;
  double series_interval_s = 0;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};

struct ClassResult {
  std::string model;
  orchestrator::PriorityClass priority = orchestrator::PriorityClass::kStandard;
  std::uint64_t submitted = 0, completed = 0, failed = 0, refused = 0, unfinished = 0;
  double throughput_per_s = 0;  // Completed over the arrival window.
  Percentiles latency_s, ttff_s;
  std::vector<double> latency_samples, ttff_samples;  // Sorted; with keep_samples.
  double last_done_s = 0;  // When its last job finished (simulated time).
};

// The value at quantile q (0..1) of `sorted`, as the results' percentiles
// take it (the element at floor(q x size)); 0 when empty.
double QuantileOf(const std::vector<double>& sorted, double q);

// The share of `sorted` at or below `limit` (1 when empty).
double ShareWithin(const std::vector<double>& sorted, double limit);

struct PoolResult {
  std::string model, stage;  // model: its models joined by '+'.
  int gpus = 0;
  int capacity = 1;
  // Busy slot-seconds over slot-seconds of the arrival window; for a
  // batching stage, the work its batches did (batch_gain of their size,
  // per second) over what full batches would have done.
  double utilization = 0;
  std::size_t max_queued = 0;
  // Busy slots over slots, per series_interval_s from time 0 to the end
  // of the run.
  std::vector<double> utilization_series;
};

struct SimResult {
  std::vector<ClassResult> classes;
  std::vector<PoolResult> pools;
  std::uint64_t events = 0;  // Scheduler calls made.
  std::uint64_t dispatches = 0;
  std::uint64_t worker_failures = 0;
  // With store_bytes: the most the store held, and the stage ends that
  // waited for room (how many, how long in all, the longest).
  double store_peak_bytes = 0;
  std::uint64_t store_waits = 0;
  double store_wait_s = 0, store_wait_max_s = 0;
  double simulated_s = 0;  // Until the last job finished (or the drain limit).
  double wall_s = 0;
  std::uint64_t peak_rss_bytes = 0;  // Of this process, at the end.
};

// One ClassResult per (model, class) of `arrivals` and `trace`, in the
// order they first appear there. Errors: kInvalidArgument naming the bad
// field (an unknown model or stage in a pool, arrival or trace, a stage
// without a pool, non-positive sizes, rates or times, a cv below 0, a
// trace out of order or past duration_s; a batch gain curve on a stage
// that is not an admission stage, with chunked input, not starting at 1,
// with a gain not > 0 or past 1024 entries, or whose pool serves more
// than one model).
Result<SimResult> Simulate(const SimConfig& config);

std::string ToJson(const SimResult& r);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_SIMULATOR_H_
