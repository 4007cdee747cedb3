// sluice/runtime/stage_worker.h
//
// StageWorker runs one stage of one or more models' pipelines for the
// orchestrator: it registers with its models, stage, capacity and labels
// (declaring its models' pipeline), receives
// assignments on a stream, runs the stage handler for each on its own
// thread, reports step progress, the first decoded output and credits in
// heartbeats, reports Done / Failed, re-registers when the orchestrator
// forgets it (restart, missed heartbeats), and drains on request.
//
// Thread safety: Drain and the destructor may be called from any thread.
// Handlers run on worker threads, up to `capacity` at once.

#ifndef SLUICE_RUNTIME_STAGE_WORKER_H_
#define SLUICE_RUNTIME_STAGE_WORKER_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/cache/cache.h"
#include "sluice/cache/condition.h"
#include "sluice/security.h"
#include "sluice/status.h"
#include "sluice/transfer/engine.h"

namespace sluice {

namespace internal {
class StageWorkerImpl;
struct RunState;
}  // namespace internal

// What a handler sees of one assignment. Valid during the handler call.
class StageContext {
 public:
  std::uint64_t job_id() const;
  const std::string& stage() const;
  const std::string& model() const;  // The job's model (one of the worker's).
  // The job's public id (what clients, the console and the orchestrator's
  // logs name it by); empty from an orchestrator that does not send it.
  const std::string& job_name() const;
  const std::string& request_json() const;  // The job's request, as submitted.
  const std::string& input() const;         // The previous stage's output (a descriptor), or empty.
  int resume_step() const;                  // Denoise: continue after this checkpointed step.
  // The job is of the interactive class (a person waits on it; the
  // orchestrator preempts batch work for it): a handler may trade
  // throughput for its latency, e.g. step it outside a batch.
  bool interactive() const;

  // Step `step` of `steps` is done; `checkpointed` if a checkpoint of it is
  // stored (a lost or preempted job resumes from it). Sent with the next
  // heartbeat.
  void Progress(int step, int steps, bool checkpointed);
  // A preview of the output as of step `step` (a small PNG; the request's
  // preview_every says how often a handler makes one): sent with the next
  // heartbeat, replacing one not yet sent (so at most one per heartbeat
  // period reaches the orchestrator). Dropped when over 64 KiB.
  void Preview(int step, std::string png);
  // Still working, without a new step (a long step, a long decode): the
  // next heartbeat renews the assignment's lease, which otherwise lapses
  // after the orchestrator's assignment timeout without progress.
  void KeepAlive();
  // The latest checkpointed step the orchestrator has answered a heartbeat
  // about (0: none). A lost job resumes from the newest checkpoint the
  // orchestrator heard of, which may lag the newest one written by several
  // heartbeats: a handler removes a checkpoint only once a later one has
  // been reported, i.e. only steps below this one.
  int ReportedCheckpoint() const;
  // The first chunk/frame of the output exists (time-to-first-frame): told
  // to the orchestrator at once, in a heartbeat sent now.
  void FirstOutput();
  // `phase` of the run took `d` (added to what it took before): reported
  // with the stage's Done and shown on the job's stage_done event, beside
  // the worker's own "start" and "run". Names: 1..32 of [a-z_] ("input",
  // "output"); at most 6 per run; others are dropped.
  void AddTiming(std::string_view phase, std::chrono::duration<double> d);
  // Adds `n` (>= 0) to the run's count `name`: reported with the stage's
  // Done and shown on the job's stage_done event (counts), e.g. the steps
  // the step cache skipped. Names as AddTiming's; at most 8 per run;
  // others, and negative n, are dropped.
  void AddCount(std::string_view name, std::int64_t n);
  // What this worker holds after the run that later jobs may name as their
  // affinity, newest first (e.g. "adapter=DIGEST" for each LoRA adapter
  // resident): reported with the stage's Done, it replaces what the
  // orchestrator learned of the worker before, so jobs stop being drawn
  // to what it dropped. At most 16 labels of at most 128 bytes are sent.
  void SetHeld(std::vector<std::string> labels);
  // The job was cancelled: stop at the next step boundary and return any
  // status (it is discarded).
  bool ShouldStop() const;
  // An interactive job needs the slot: checkpoint at the next step and
  // return a StageOutput with `preempted` set.
  bool ShouldCheckpoint() const;

 private:
  friend class internal::StageWorkerImpl;
  explicit StageContext(std::shared_ptr<internal::RunState> s) : s_(std::move(s)) {}
  std::shared_ptr<internal::RunState> s_;
};

// Whether `phase` may name a handler's timing (StageContext::AddTiming):
// 1..32 of [a-z_], and not the worker's own "start" or "run".
bool IsTimingPhase(std::string_view phase);
// Whether `name` may name a count (StageContext::AddCount): 1..32 of [a-z_].
bool IsCountName(std::string_view name);
// Whether StageContext::SetHeld sends `labels` whole: kInvalidArgument
// naming the first label that is empty or over 128 bytes, or the count
// when there are more than 16.
Status CheckHeldLabels(const std::vector<std::string>& labels);

struct StageOutput {
  std::string output;  // Descriptor for the next stage, or the final result bytes.
  std::string type;    // Final stage: MIME type (e.g. "image/png").
  std::vector<std::string> payload_keys;  // Store keys holding the output, if any.
  bool preempted = false;                 // Yielded after ShouldCheckpoint().
};

// Runs one assignment. Errors become Failed reports: kUnavailable and
// kResourceExhausted are retryable, everything else is not.
using StageHandler = std::function<Result<StageOutput>(StageContext&)>;

struct StageWorkerConfig {
  std::string orchestrator;  // gRPC "host:port".
  // Where the orchestrator is now, asked when it cannot be reached (e.g.
  // its leader in etcd): a different "host:port" replaces `orchestrator`
  // for the next registration. Empty answer or no function: keep trying
  // the same one. Called on the worker's own threads; must be thread-safe.
  std::function<std::string()> resolve_orchestrator;
  // A stage of `pipeline`: a free-form identifier ([a-z0-9_-], 1..64).
  std::string stage;
  // The models it serves; empty: the orchestrator's default model. Jobs of
  // a model run only on its workers.
  std::vector<std::string> models;
  // Its models' pipeline as text: stage names in order, ":admission"
  // marking admission stages (pinned, stateful, preemptible), e.g.
  // "encode,denoise:admission,decode,upscale". Declares a model the
  // orchestrator does not know yet; registration is refused (and logged)
  // when it differs from a model's declaration. Empty: the standard
  // "encode,denoise:admission,decode" (and `stage` must be one of those).
  std::string pipeline;
  int capacity = 1;  // Concurrent assignments, 1..1024.
  std::vector<std::string> labels;
  std::string name;  // For logs.
  // The sizes its models draw best ("WIDTHxHEIGHT", each 64..2048 and a
  // multiple of 8; what they were trained at): the orchestrator gives them
  // to requests for its models without a size. Empty: the front's defaults.
  std::string image_size, video_size;
  // Its models read a request's picture (an edit's image, a video's
  // input_reference): the orchestrator refuses requests with one (400) for
  // a model none of whose workers declared it.
  bool takes_picture = false;
  std::chrono::milliseconds heartbeat_interval{200};
  // The lease of its assignments: no progress (a step, KeepAlive) for this
  // long and the orchestrator gives the work to another worker. Set it from
  // the model's pace (sluice worker --profile does: ProfileLease); 0: the
  // orchestrator's --assignment-timeout-ms.
  std::chrono::milliseconds assignment_timeout{0};
  // Encode workers with a condition cache (ReferenceStageOptions::
  // condition_cache): the encoder whose keys its entries are under, so the
  // orchestrator lets a job whose conditions are all cached skip this stage.
  std::optional<cache::ConditionEncoder> condition_encoder;
  // Caches whose counters its heartbeats carry to the orchestrator's
  // /metrics (summed per cache kind over workers). Each must outlive it.
  std::vector<const cache::Cache*> caches;
  // The engine its payloads move through (the connector's), whose bytes
  // per transport its heartbeats carry to the orchestrator's /metrics
  // (sluice_worker_transfer_bytes_total). Null: not reported. Must outlive
  // it.
  const TransferEngine* engine = nullptr;
  // The cluster credential and TLS for its calls to the orchestrator
  // (sluice/security.h); a refused registration is logged and retried.
  SecurityConfig security;
  // Called (on the job's runner thread) with a finished stage's store
  // keys when its Done report fails (the orchestrator is down or
  // restarting): no orchestrator will ever release them, so the worker
  // removes them (sluice worker: with its store client). An orchestrator
  // that did take the report and still wants the payload re-runs the stage
  // on LOST. Null: the keys stay until the store's own limits.
  std::function<void(const std::vector<std::string>& keys)> discard_payloads;
};

// What a worker has done since it started, for its /metrics (`sluice
// worker --metrics-port`). Reports count when sent, whether or not the
// orchestrator took them.
struct StageWorkerMetrics {
  // A histogram of seconds: `counts[i]` observations of at most
  // kBounds[i] (and above the bound before), `count` in all, `sum`; and
  // per bucket (the last: above every bound) the newest observation's job
  // (its public id; empty: none yet) and value, its exemplar.
  struct Seconds {
    static constexpr std::array<double, 14> kBounds{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                    1,     2.5,  5,     10,   30,  60,   120};
    std::array<std::uint64_t, kBounds.size()> counts{};
    std::uint64_t count = 0;
    double sum = 0;
    struct Exemplar {
      std::string job;
      double seconds = 0;
    };
    std::array<Exemplar, kBounds.size() + 1> exemplars;
    void Add(double seconds, std::string_view job = {});
  };
  std::string stage;
  int capacity = 0;
  int running = 0;              // Assignments running now.
  std::uint64_t done = 0;       // Done reports.
  std::uint64_t preempted = 0;  // Yields after a checkpoint order.
  // Failed reports by code (kCancelled: stopped on request), refusals of
  // assignments it could not take (draining, duplicate) included.
  std::map<StatusCode, std::uint64_t> failed;
  std::uint64_t steps = 0;  // Steps its handlers reported (StageContext::Progress).
  Seconds run;              // Handler run time per assignment.
  Seconds step;  // Per step: since the previous step moved (the run's start for the first).
};

class StageWorker {
 public:
  // Registers (retrying while the orchestrator is away) and starts serving.
  // Errors: kInvalidArgument naming the bad field (stage, models, pipeline,
  // a stage not in the pipeline, capacity, heartbeat).
  static Result<std::unique_ptr<StageWorker>> Start(StageWorkerConfig config, StageHandler handler);
  // Drain(), then stops.
  ~StageWorker();
  // Stops taking new work (advertises no free slots), waits up to `timeout`
  // for running handlers, then reports what still runs as failed
  // (retryable) so the orchestrator re-queues it. Returns once every
  // report (Done or Failed) has been answered or its RPC gave up (10 s):
  // a worker that leaves after Drain never makes the orchestrator re-queue
  // work it finished. Idempotent.
  void Drain(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Assignments finished (done or failed) so far.
  std::uint64_t completed() const;
  // Runs that went on under a newer registration of this worker: the
  // orchestrator restarted on its journal and assigned a job this worker
  // still ran to it again (the run reports to the new registration; it is
  // neither refused nor run twice).
  std::uint64_t adopted() const;
  // A snapshot of its counters. Thread-safe.
  StageWorkerMetrics Metrics() const;
  // Blocks until the orchestrator has accepted its registration (true) or
  // `timeout` passes (false). While it is unreachable the worker retries
  // with backoff (200 ms doubling to 5 s), logging each failure; a refused
  // registration (a pipeline that differs from its model's) is logged
  // once per reason and retried the same way.
  bool WaitRegistered(std::chrono::milliseconds timeout);

 private:
  explicit StageWorker(std::unique_ptr<internal::StageWorkerImpl> impl);
  std::unique_ptr<internal::StageWorkerImpl> impl_;
};

}  // namespace sluice

#endif  // SLUICE_RUNTIME_STAGE_WORKER_H_
