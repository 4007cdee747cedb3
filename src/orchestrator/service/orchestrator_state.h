// The orchestrator service's state, independent of gRPC and HTTP: the
// scheduler core, the job table (request, status, step progress, events,
// outputs, result), registered workers with their assignment queues, and
// heartbeat deadlines. One mutex; every method may be called from any
// thread.
#ifndef SLUICE_ORCHESTRATOR_SERVICE_ORCHESTRATOR_STATE_H_
#define SLUICE_ORCHESTRATOR_SERVICE_ORCHESTRATOR_STATE_H_

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "sluice/adapters.h"
#include "sluice/cache/cache.h"
#include "sluice/cache/condition.h"
#include "sluice/orchestrator/server.h"
#include "sluice/store/types.h"

#include "common/call_mac.h"
#include "common/mutex.h"
#include "orchestrator/core/autoscaler.h"
#include "orchestrator/core/checkpoint_keeper.h"
#include "orchestrator/core/job_watchers.h"
#include "orchestrator/core/payload_ledger.h"
#include "orchestrator/core/scheduler.h"
#include "orchestrator/core/worker_instances.h"
#include "orchestrator/core/worker_registry.h"
#include "orchestrator/core/worker_reports.h"
#include "orchestrator/service/job_status.h"
#include "orchestrator/service/result_dir.h"

namespace sluice::orchestrator {

struct ServiceOptions {
  SchedulerOptions scheduler;
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds worker_timeout{3000};  // No heartbeat this long: worker lost.
  // Finished jobs stay queryable (status, error, result) for the newest
  // max_finished_jobs and at most result_ttl after they finished, in memory
  // and, with a journal, across restarts.
  std::size_t max_finished_jobs = 10000;
  std::chrono::seconds result_ttl{3600};
  // Models declared from the start (jobs queue for them before any worker
  // registers); workers declare more as they register.
  std::vector<ModelSpec> models;
  // Jobs naming no model run on this one; declared with the standard
  // pipeline unless `models` declares it otherwise.
  std::string default_model = "sluice-reference";
  // When set, every submitted job runs only these stages of its model
  // (colocated serving: {"denoise"}, one worker doing every stage).
  std::optional<std::vector<std::string>> pipeline;
  // Per-tenant bounds on unfinished jobs (tenants not named: none).
  std::map<std::string, TenantLimits> tenants;
  // Final outputs are checked before they are served (output_check.h); a
  // bad one fails that attempt (retried elsewhere), and a worker with this
  // many bad outputs gets no further work (it stays registered, as if
  // draining). Off: whatever the last stage returns is served.
  bool check_outputs = true;
  int max_bad_outputs = 3;
  // Whether a cache entry is committed in the store. With it, a job of a
  // model whose encode workers declared a condition encoder, and whose
  // condition keys are all cached, skips that stage: the next one gets a
  // cached input naming the entries. Null: no job skips a stage.
  std::function<Result<bool>(const std::string& key)> cache_exists;
  // Condition-cache entries are the submitting tenant's: its jobs' keys
  // carry its name (cache::kCacheScopeField), so one tenant's cache hit
  // tells it nothing of what another asked. Shared: every tenant's jobs
  // find one another's entries (more hits, and that leak).
  bool shared_condition_cache = false;
  // How often one job runs its encode stage again because a cached input
  // was evicted before its consumer read it; past that the job fails.
  int max_cache_reruns = 3;
  // How long the checkpoints of a job submitted with keep_checkpoints stay
  // in the store after each is written (their ttl), for resume_from.
  std::chrono::seconds checkpoint_retention{3600};
  // Pool sizes recommended from the pools' load, sampled once a second.
  AutoscaleOptions autoscale;
  // The time the state runs on: `now` for deadlines, timeouts and
  // latencies, `unix_ms` for the Unix times jobs and the journal show.
  // Null: the steady and the system clock. A test feeds fake ones and
  // drives the state by moving them and calling Tick: no sleeps, no
  // threads (the blocking waits, WaitFinished and EventsFrom, still wait
  // in real time).
  std::function<TimePoint()> now;
  std::function<std::int64_t()> unix_ms;
};

// Where a resumed job starts: step `step` of job `job`'s kept checkpoints.
struct ResumeFrom {
  std::string job;  // Its public id.
  int step = 0;
};

// The affinity of a job naming LoRA adapters: this and its first
// adapter's digest.
inline constexpr std::string_view kAdapterAffinity = kAdapterLabelPrefix;

struct JobRequest {
  std::string kind = "image";  // "image" | "video".
  // The job's public id ("job-" + 128 random bits in hex); empty: one is
  // made at submission. Clients name jobs only by it.
  std::string name;
  std::string tenant;        // Who submitted it ("" when the API is open).
  std::string request_json;  // Handed to every stage as is.
  std::string model;         // Empty: the default model.
  // Stage names in the model's order; empty: every stage of the model.
  // Submission fills in both, as resolved.
  std::vector<std::string> pipeline;
  PriorityClass priority = PriorityClass::kStandard;
  std::optional<std::chrono::milliseconds> deadline;  // From submission.
  // A worker label preferred for its stages (Scheduler JobSpec::affinity);
  // kAdapterAffinity + a digest for a job with LoRA adapters, which the
  // workers it is dispatched to then carry (Scheduler::LearnLabel).
  std::string affinity;
  // Jobs of one key may share a batch (Scheduler JobSpec::batch_key): the
  // request's size, frames and steps, as the HTTP front sets it. Not
  // journaled: a job taken back after a restart has none.
  std::string batch_key;
  // Its denoise keeps a checkpoint of every step for checkpoint_retention
  // (the request JSON carries keep_checkpoints and keep_checkpoints_s).
  bool keep_checkpoints = false;
  // Denoise starts from this kept checkpoint of an earlier job (possibly
  // under a changed prompt, negative prompt or guidance); submission puts
  // the earlier request and the step into the request JSON as
  // "resume_checkpoint".
  std::optional<ResumeFrom> resume_from;
};

// How far an unfinished job got: the output of its last finished stage
// (the next stage's input) with the store keys holding it, and the latest
// checkpointed step of the stage running after it.
struct JobProgress {
  std::optional<std::string> done;  // None: no stage has finished.
  std::string output;
  std::vector<std::string> keys;
  int checkpoint_step = 0;
};

// How a job ended, as the journal keeps it for its clients after a restart.
struct JobOutcome {
  JobStatus status = JobStatus::kFailed;  // Succeeded, failed or cancelled.
  std::string error;
  std::string error_type;
  std::string result_type;
  std::string_view result;  // Succeeded: the final output (copied by the journal).
  std::int64_t finished_unix_s = 0;
};

// A finished job read back from the journal.
struct FinishedRecord {
  JobId id = 0;
  JobRequest request;
  JobStatus status = JobStatus::kFailed;  // Succeeded, failed or cancelled.
  std::string error, error_type, result_type, result;
  std::int64_t created_unix_s = 0, finished_unix_s = 0;
  // Succeeded, but the journal did not keep the result (larger than it
  // keeps): it is answered as no longer kept.
  bool result_dropped = false;
};

struct JournaledJob {
  JobId id = 0;
  JobRequest request;
  JobProgress progress;
  // The declaration of its model when it was accepted (empty in journals
  // older than models): a restart declares it again before workers come.
  std::vector<StageDecl> model_stages;
};

// Where accepted jobs are made durable (service/journal.h: SQLite). Called
// under the state's lock.
// Step `step` of job `job` checkpointed to keep (keep_checkpoints), as
// reported at `unix_ms`.
struct KeptCheckpoint {
  JobId job = 0;
  int step = 0;
  std::int64_t unix_ms = 0;
};

class JournalOutbox;  // service/journal_outbox.h

class JobJournal {
 public:
  virtual ~JobJournal() = default;
  // `model_stages`: the declaration of r.model.
  virtual Status Add(JobId id, const JobRequest& r, const std::vector<StageDecl>& model_stages) = 0;
  // Replaces what was saved of `id`'s progress.
  virtual Status SaveProgress(JobId id, const JobProgress& p) = 0;
  // Marks the job finished with its outcome (and result) and drops its
  // progress.
  virtual Status Finish(JobId id, const JobOutcome& outcome) = 0;
  // Unfinished jobs with their progress, oldest first.
  virtual Result<std::vector<JournaledJob>> Unfinished() = 0;
  // The newest `keep` finished jobs that finished at or after
  // `since_unix_s`, oldest first, with their results. A record whose
  // status word is not a final status (a damaged journal, or one a newer
  // version wrote) is left out, logged with the job and the word.
  virtual Result<std::vector<FinishedRecord>> Finished(std::size_t keep,
                                                       std::int64_t since_unix_s) = 0;
  // Records a kept checkpoint (a second report of the same step is a
  // no-op).
  virtual Status Keep(const KeptCheckpoint& k) = 0;
  // Every kept checkpoint of a job the journal still holds (expired ones
  // too, until Prune: a resume from one answers that it expired).
  virtual Result<std::vector<KeptCheckpoint>> Kept() = 0;
  // Forgets finished jobs beyond the newest `keep` or finished before
  // `since_unix_s`, and kept checkpoints recorded before `kept_since_unix_ms`
  // or of jobs forgotten.
  virtual Status Prune(std::size_t keep, std::int64_t since_unix_s,
                       std::int64_t kept_since_unix_ms) = 0;
  virtual Result<JobId> MaxId() = 0;
  // Whether calls may come from several threads at once. A concurrent
  // journal's Add is called outside the orchestrator's lock (concurrent
  // submissions share its writes); a job whose submission then fails is
  // dropped with Drop. Others are called under that lock only.
  virtual bool concurrent() const { return false; }
  // Forgets job `id` entirely (a submission refused after its Add).
  // Concurrent journals implement it.
  virtual Status Drop(JobId id) {
    return UnimplementedError("journal: Drop of job " + std::to_string(id));
  }
};

// Fixed-bucket latency histogram (seconds), Prometheus style.
// Seconds: `counts[i]` observations at most kBuckets[i] (cumulative),
// `count` in all, their `sum`; per bucket (the last: above every bound)
// the newest observation's job (public id) and value, its exemplar.
struct Histogram {
  static constexpr std::array<double, 12> kBuckets = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5,
                                                      1,     2,     5,    10,   60,  300};
  std::array<std::uint64_t, kBuckets.size()> counts{};
  std::uint64_t count = 0;
  double sum = 0;
  struct Exemplar {
    std::string job;
    double seconds = 0;
  };
  std::array<Exemplar, kBuckets.size() + 1> exemplars;
  void Add(double seconds, std::string_view job = {}) {
    ++count;
    sum += seconds;
    std::size_t own = kBuckets.size();
    for (std::size_t i = 0; i < kBuckets.size(); ++i) {
      counts[i] += seconds <= kBuckets[i] ? 1 : 0;
      own = seconds <= kBuckets[i] && own == kBuckets.size() ? i : own;
    }
    if (!job.empty()) {
      exemplars[own].job.assign(job);
      exemplars[own].seconds = seconds;
    }
  }
};

struct JobEvent {
  double t_ms = 0;  // Since submission.
  // queued, stage_started, step, preview, stage_done, done, failed,
  // cancelled.
  std::string type;
  std::string stage;  // For stage events.
  int step = 0, steps = 0;
  // preview: the PNG (only the job's newest preview event keeps it, so a
  // job holds one preview however many steps report one).
  std::string detail;
  // stage_done: where the run's time went on its worker (DoneRequest's
  // timings_ms, checked).
  std::map<std::string, double> timings_ms;
  // stage_done: what the run counted (DoneRequest's counts, checked).
  std::map<std::string, std::int64_t> counts;
  // stage_started: the worker the stage runs on (0: none).
  std::uint64_t worker = 0;
};

struct JobView {
  JobId id = 0;
  std::string name;  // The public id.
  std::string tenant;
  std::string kind;
  std::string model;
  JobStatus status = JobStatus::kQueued;
  std::string stage;  // Current or last stage.
  int step = 0, steps = 0;
  std::string error;
  // Whose fault a failure is: "invalid_request_error" (a stage rejected the
  // job's input) or "server_error".
  std::string error_type = "server_error";
  std::string result;  // Final stage output (e.g. PNG bytes), unless result_stored.
  std::string result_type;
  // The result is in the state's result dir, not in `result`: read it with
  // OrchestratorState::ResultBytes.
  bool result_stored = false;
  std::string request_json;
  std::vector<JobEvent> events;
  std::int64_t created_unix_s = 0;
  std::int64_t finished_unix_s = 0;  // 0 until it finishes.
  double ttff_ms = -1;               // Submission to the first decoded chunk/frame; -1: not yet.
  // 0..1 through its stages, by their declared kinds (PipelineProgress);
  // filled by Get and List. Succeeded: 1.
  double progress = 0;
  bool finished() const { return IsFinished(status); }
};

// A declared model as clients see it.
struct ModelView {
  std::string name;
  std::vector<StageDecl> stages;
  std::vector<std::size_t> workers;  // Per stage: registered workers serving it.
  std::int64_t created_unix_s = 0;   // When it was declared.
  bool ready() const {
    return std::all_of(workers.begin(), workers.end(), [](std::size_t n) { return n > 0; });
  }
};

// Bytes one transport of workers' engines moved.
struct TransportBytes {
  std::uint64_t read = 0, written = 0;
  TransportBytes& operator+=(const TransportBytes& o) {
    read += o.read;
    written += o.written;
    return *this;
  }
};

struct ServiceStats {
  SchedulerStats scheduler;
  std::uint64_t submitted = 0, succeeded = 0, failed = 0, cancelled = 0, rejected = 0;
  std::uint64_t restored = 0;       // Unfinished jobs taken back from the journal.
  std::uint64_t payloads_lost = 0;  // Store LOST events that re-ran a stage.
  std::uint64_t cache_skips = 0;    // Jobs that skipped a stage: every input was cached.
  std::uint64_t cache_reruns = 0;   // Stages re-run because a cached input was evicted.
  // Workers' cache counters per cache kind, summed over every registration
  // (those gone included), as their heartbeats last reported them.
  std::map<std::string, cache::CacheStats> caches;
  // Workers' engine bytes per (stage, transport), likewise summed.
  std::map<std::pair<std::string, std::string>, TransportBytes> transports;
  // Submissions' condition lookups per request text field (prompt,
  // negative_prompt, ...): (looked up, found cached).
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> condition_lookups;
  Histogram job_latency;  // Submission to success.
  Histogram ttff;         // Submission to the first decoded chunk/frame.
  // Queued for a stage to dispatched, per (model, stage).
  std::map<std::pair<std::string, std::string>, Histogram> dispatch_latency;
  std::vector<PoolRecommendation> recommendations;  // The latest.
  // The store's usage as its master last answered (SetStoreUsage); nullopt
  // without a store or before its first answer. `store_answered`: whether
  // the master answered the latest ask (false: `store` is older).
  std::optional<StoreUsage> store;
  bool store_answered = false;
};

class OrchestratorState {
 public:
  using Sink = std::function<void(const AssignmentOrder&)>;
  // `journal` (optional) must outlive the state.
  // `results` (optional, beside the journal): where succeeded jobs' result
  // bytes go, so memory holds none of them; both must outlive the state.
  explicit OrchestratorState(ServiceOptions o, JobJournal* journal = nullptr,
                             ResultDir* results = nullptr);
  // Writes what its outbox still holds.
  ~OrchestratorState();
  // Whether every one of the store keys still holds a complete object.
  using PayloadsExist = std::function<bool(const std::vector<std::string>& keys)>;
  // Resubmits the journal's unfinished jobs (same ids). A job whose last
  // finished stage's output is still in the store (`exist`) runs on from
  // the next stage, and from that stage's latest checkpoint; any other job
  // (no store keys to check, keys gone, no `exist`) runs from its first
  // stage. Call once, before serving. Errors: the journal's.
  Status Restore(const PayloadsExist& exist = nullptr);

  // Errors: kNotFound (a model nobody declared: the HTTP face answers 404
  // model_not_found); kInvalidArgument (bad pipeline); kAlreadyExists (a
  // name in use); kResourceExhausted (queue full, or the tenant at its jobs
  // in flight or its share of the queue: the HTTP face answers 429).
  Result<JobId> Submit(const JobRequest& r);
  // The job whose public id is `name`, if the state holds it.
  std::optional<JobId> Find(std::string_view name);
  // Declares a model (see Scheduler::DeclareModel); errors as there.
  Status DeclareModel(const ModelSpec& m);
  // Every declared model with its workers per stage, in name order.
  std::vector<ModelView> Models();
  // The model jobs naming none run on.
  const std::string& default_model() const { return options_.default_model; }
  // The size a request for `model` ("" : the default model) without one
  // gets: what its latest registered worker declared for images (`video`
  // false) or videos; "" when none did.
  std::string DefaultSize(const std::string& model, bool video);
  // Whether a worker of `model` ("": the default model) declared reading a
  // request's picture (Registration::takes_picture; once one has, it holds).
  bool TakesPicture(const std::string& model);
  struct Registration {
    std::vector<std::string> models;  // Empty: the default model.
    std::string stage;
    int capacity = 1;
    std::vector<std::string> labels;
    // The pipeline the worker declares for its models: declares a model
    // nobody has yet, and must match one that is declared. Empty: the
    // standard pipeline for an undeclared model, anything for a declared one.
    std::vector<StageDecl> pipeline;
    // Its assignments' lease (from its model's profile); 0: the default.
    std::chrono::milliseconds assignment_timeout{0};
    // Encode workers with a condition cache: the encoder whose condition
    // keys jobs of its models are looked up under. Workers of one model
    // declaring different encoders (a rolling upgrade) turn skipping off
    // for that model until the orchestrator restarts.
    std::optional<cache::ConditionEncoder> condition_encoder;
    // The worker process's id and this attempt's number (0: none).
    std::uint64_t instance = 0;
    std::uint64_t attempt = 0;
    // The sizes its models draw best ("WIDTHxHEIGHT", what they were
    // trained at; empty: none): requests for them without a size get these.
    std::string image_size, video_size;
    // Its models read a request's picture (TakesPicture).
    bool takes_picture = false;
  };
  // Errors: kInvalidArgument naming the field (stage, capacity, model,
  // pipeline, or a pipeline that differs from its model's declaration);
  // kNotFound (the stage is not one of a declared model's);
  // kFailedPrecondition (an attempt older than the instance's registration
  // held now: a request delayed in the network). The id is random (not
  // guessable); `*session_secret` (when not null) gets the registration's
  // session secret, which ProveWorker checks (worker_session.h).
  Result<WorkerId> Register(Registration r, std::string* session_secret = nullptr);
  // Whether `proof` (a call_mac.h proof under worker `w`'s session secret,
  // made for `method`) is the worker's: the call may act as `w`.
  // Errors: kNotFound (unknown worker: it must register again);
  // kPermissionDenied naming the check that failed (no proof, wrong,
  // stale, replayed).
  Status ProveWorker(WorkerId w, std::string_view method, std::string_view proof)
      SLUICE_EXCLUDES(mu_);
  // The worker's assignment stream `stream` (an identity, never
  // dereferenced) opened: queued assignments go to `sink` now, later ones as
  // they are decided. Errors: kNotFound (unknown worker). `closed` runs
  // (under the state's lock, must not call back) when the worker is declared
  // lost, ending its stream; a stream replaced by a newer one of the same
  // worker has its `closed` run at once.
  Status Attach(WorkerId w, const void* stream, Sink sink, std::function<void()> closed);
  // The stream `stream` of worker `w` ended: assignments queue again until
  // the next Attach. A stream already replaced by a newer one changes
  // nothing (the newer one stays attached).
  void Detach(WorkerId w, const void* stream);
  // Errors: kNotFound (unknown worker: it must register again).
  Status Heartbeat(const HeartbeatReport& r);
  // Errors: kNotFound, kFailedPrecondition (stale or duplicate report).
  Status Done(const DoneReport& r);
  Status Failed(const FailedReport& r);
  // Forgets worker `w` now (it leaves on purpose), re-queueing what it still
  // holds. Errors: kNotFound (unknown worker; already gone).
  Status Unregister(WorkerId w);
  // Errors: kNotFound (unknown or finished job).
  Status Cancel(JobId id);
  // The store lost `key` (its last replica): the stage whose output it held
  // runs again if the job still needs it. Unknown keys are ignored.
  void PayloadLost(const std::string& key);
  // Store keys no longer needed, to remove: a stage's output once the next
  // stage is done with it, and everything of a finished or cancelled job.
  std::vector<std::string> TakeReleasedKeys();

  std::optional<JobView> Get(JobId id);
  // A job's newest preview (a PNG a denoise worker sent with its progress,
  // the request asking for preview_every) and the step it shows; nullopt
  // for an unknown job or one with no preview yet.
  struct PreviewImage {
    std::string png;
    int step = 0;
  };
  std::optional<PreviewImage> Preview(JobId id);
  // The result bytes of `v` (a view from Get or WaitFinished): `v.result`,
  // or read from the result dir when `v.result_stored` (blocking disk I/O;
  // no lock held). Errors: kNotFound (expired, forgotten or deleted from
  // the dir meanwhile); kUnavailable (the file cannot be read).
  Result<std::string> ResultBytes(const JobView& v) const;
  // Jobs of `kind` ("": every kind) the state still holds, in id
  // (submission) order: ascending from just after `after` (0: from the
  // oldest), or descending from just before it (0: from the newest); at
  // most `limit`. Views carry no result bytes and no events. Only
  // `tenant`'s jobs unless `any_tenant`.
  std::vector<JobView> List(std::string_view kind, std::string_view tenant, bool any_tenant,
                            JobId after, std::size_t limit, bool ascending);
  // Cancels job `id` if it is unfinished, then forgets it (its result and
  // events; later lookups answer not found). Errors: kNotFound.
  Status Forget(JobId id);
  // Blocks until the job finishes or `timeout` passes; nullopt if unknown.
  std::optional<JobView> WaitFinished(JobId id, std::chrono::milliseconds timeout);
  // Events of `id` from index `from` on; blocks up to `timeout` for new ones.
  // Returns the events and whether the job has finished.
  std::pair<std::vector<JobEvent>, bool> EventsFrom(JobId id, std::size_t from,
                                                    std::chrono::milliseconds timeout);
  // Calls `wake` each time job `id` gets an event (every status, stage and
  // step change comes with one), until Unwatch. `wake` runs under the
  // state's lock: it must only hand work elsewhere (post it), never call
  // back into the state or block. Returns the watch's token; 0 (nothing
  // registered) when the job is unknown.
  std::uint64_t Watch(JobId id, std::function<void()> wake);
  // Ends a watch; `wake` is not called after this returns. Unknown tokens
  // (0, ended) are ignored.
  void Unwatch(std::uint64_t token);
  // Declares silent workers lost and lets time pass in the scheduler.
  void Tick();
  ServiceStats Stats();
  // Every pool's load now (PoolStats as sluice/orchestrator/autoscale.h
  // has it: busy slots are its slots less the free ones).
  std::vector<PoolLoad> PoolLoads();
  // The autoscaler's latest recommendations (Tick samples the load at
  // every tick and decides once a second).
  std::vector<PoolRecommendation> Recommendations();
  // What the store holds, as its master answered (nullopt: it did not
  // answer; the last answer is kept, marked old). Shown by Stats.
  void SetStoreUsage(std::optional<StoreUsage> usage);
  const ServiceOptions& options() const { return options_; }

 private:
  // Writes the journal outbox after the calling method released the lock
  // (declared before the lock in every method that may queue writes).
  class JournalFlush {
   public:
    explicit JournalFlush(OrchestratorState* s) : s_(s) {}
    ~JournalFlush() { s_->WriteJournal(); }
    JournalFlush(const JournalFlush&) = delete;
    JournalFlush& operator=(const JournalFlush&) = delete;

   private:
    OrchestratorState* s_;
  };
  // Writes the queued journal writes, in the order they were decided.
  void WriteJournal() SLUICE_EXCLUDES(mu_);

  struct JobRecord {
    JobView view;
    JobRequest request;
    TimePoint submitted;
    TimePoint queued_since;                      // Became ready for its current stage.
    std::map<std::string, std::string> outputs;  // Per stage.
    JobProgress saved;                           // What the journal holds of its progress.
    int cache_reruns = 0;                  // Producer re-runs after a cached input was evicted.
    PreviewImage preview;                  // Newest (png empty: none).
    std::size_t preview_event = SIZE_MAX;  // Its index in view.events.
  };
  // A model's declared condition encoder and the stage declaring it.
  struct EncoderDecl {
    cache::ConditionEncoder encoder;
    std::string stage;
    bool conflict = false;  // Two declarations differ: no skipping.
  };
  // A job's first stage skipped on cached inputs: its output stands in.
  struct CachedStart {
    std::string stage;
    std::string input;  // A cached input (sluice/cache/condition.h).
  };
  // A registered worker's link (its stage, liveness and counts are
  // registry_'s): how assignments reach it, its session and its counters.
  struct WorkerRecord {
    std::deque<AssignmentOrder> pending;  // Until the stream attaches.
    Sink sink;
    std::function<void()> closed;
    const void* stream = nullptr;                      // The attached stream's identity.
    std::map<std::string, cache::CacheStats> caches;   // Its last heartbeat's.
    std::map<std::string, TransportBytes> transports;  // Likewise, per transport.
    // Checks the proofs of its session secret (shared: checked unlocked).
    std::shared_ptr<internal::CallVerifier> session;
  };
  // Declares worker `it` lost (`why` in the log and its jobs' events): its
  // work runs again, its stream ends, its counters join the totals. The
  // iterator after it.
  std::map<WorkerId, WorkerRecord>::iterator LoseWorkerLocked(
      std::map<WorkerId, WorkerRecord>::iterator it, TimePoint now, const std::string& why)
      SLUICE_REQUIRES(mu_);
  void ApplyLocked(TimePoint now) SLUICE_REQUIRES(mu_);
  // A worker's preview of a running job: kept (newest only) and sent as a
  // "preview" event. Ignored for a finished job or one over kMaxPreviewBytes.
  void PreviewLocked(JobRecord& j, const StepReport& p, TimePoint now) SLUICE_REQUIRES(mu_);
  // Worker `w`'s step progress (stale entries, for a job that moved on,
  // are skipped) and a job's first output (TTFF; once per job), from a
  // heartbeat or a Done.
  void ProgressLocked(WorkerId w, const StepReport& p, TimePoint now) SLUICE_REQUIRES(mu_);
  void FirstOutputLocked(std::uint64_t job, TimePoint now) SLUICE_REQUIRES(mu_);
  void EventLocked(JobRecord& j, TimePoint now, std::string type, std::string detail = {})
      SLUICE_REQUIRES(mu_);
  void SendLocked(WorkerId w, AssignmentOrder a) SLUICE_REQUIRES(mu_);
  void CountReportLocked(WorkerId w) SLUICE_REQUIRES(mu_);
  // A final stage's output that failed its check: the attempt fails
  // (retryable) and the worker is counted, refused work past the limit.
  Status RefuseOutputLocked(JobRecord& j, const DoneReport& r, const Status& why, TimePoint now)
      SLUICE_REQUIRES(mu_);
  void FinishLocked(JobRecord& j, JobStatus status, std::string error, TimePoint now)
      SLUICE_REQUIRES(mu_);
  // Cancels an unfinished job. Errors: the scheduler's.
  Status CancelLocked(JobRecord& j, TimePoint now) SLUICE_REQUIRES(mu_);
  // Drops a job from the table (and its name).
  void EraseLocked(JobId id) SLUICE_REQUIRES(mu_);
  // The state's time (ServiceOptions::now, else the steady clock).
  TimePoint Now() const;
  // Seconds since the Unix epoch, now (journal times, retention), from
  // ServiceOptions::unix_ms, else the system clock.
  std::int64_t UnixNow() const;
  std::int64_t UnixNowMs() const;  // Milliseconds, likewise.
  // Keeps a succeeded job's result: in the result dir when there is one
  // (in memory if writing it fails), else in memory.
  void StoreResultLocked(JobRecord& rec, std::string_view bytes) SLUICE_REQUIRES(mu_);
  // Removes results in the dir that no restored job answers for.
  void RemoveUnownedResultsLocked() SLUICE_REQUIRES(mu_);

  // (orchestrator_state_submit.cc, with Submit and SubmitLocked) Refuses
  // a submission over its tenant's jobs in flight or queue share
  // (kResourceExhausted, counted as rejected).
  Status AdmitTenantLocked(const std::string& tenant) SLUICE_REQUIRES(mu_);
  // `r` with its model (the default when unset) and pipeline (the model's
  // stages when unset) filled in; the model's stages into `*stages`.
  // kNotFound: a model not served here.
  Result<JobRequest> ResolveModelLocked(const JobRequest& r, std::vector<StageDecl>* stages)
      SLUICE_REQUIRES(mu_);
  // Submit for a concurrent journal: the id is taken and the request
  // checked under the lock, the journal written outside it (concurrent
  // submissions share a transaction), then the job enters the scheduler;
  // if it cannot now (its name taken meanwhile, the queue full), the
  // journal drops it.
  Result<JobId> SubmitJournaledOutside(JobRequest r, TimePoint now,
                                       const std::optional<CachedStart>& cached)
      SLUICE_EXCLUDES(mu_);
  // `from` (restored jobs): the progress it resumes from. `cached`: its
  // first stage is skipped, its output given.
  Result<JobId> SubmitLocked(JobId id, const JobRequest& r, TimePoint now, bool journal,
                             const JobProgress* from = nullptr, const CachedStart* cached = nullptr)
      SLUICE_REQUIRES(mu_);
  // (orchestrator_state_resume.cc) Checks `r.resume_from` against the
  // earlier job's kept checkpoints and puts them into `r.request_json`;
  // adds keep_checkpoints_s for a job that keeps its own. Errors:
  // kNotFound ("resume_from: ..." a job or checkpoint that is not there);
  // kInvalidArgument (a step not kept, listing those kept; a request whose
  // size, seed, steps or frames differ from the earlier one's).
  Status ResolveCheckpointsLocked(JobRequest& r, TimePoint now) SLUICE_REQUIRES(mu_);
  // (orchestrator_state_cache.cc) Records a worker's encoder declaration.
  void DeclareEncoderLocked(const std::vector<std::string>& models, const std::string& stage,
                            const cache::ConditionEncoder& e) SLUICE_REQUIRES(mu_);
  // The skipped first stage of `r` when every condition key its model's
  // encoder gives is cached; nullopt otherwise (no declaration, a conflict,
  // a miss, the store unreachable). Looks the keys up without the lock.
  std::optional<CachedStart> CachedStartFor(const JobRequest& r) SLUICE_EXCLUDES(mu_);
  // (orchestrator_state_cache.cc) `request_json` with its cache scope set
  // to `tenant` (cache::kCacheScopeField), or removed when the deployment
  // shares condition entries or the API is open; whatever the client sent
  // there is replaced. A request that is not a JSON object is unchanged.
  std::string WithCacheScope(const std::string& request_json, const std::string& tenant) const;
  // (orchestrator_state_cache.cc) A heartbeat's cache counters.
  static void RecordCachesLocked(WorkerRecord& w, const HeartbeatReport& r);
  // Keeps a departing worker's cache counters in the totals.
  // Its engine's bytes per transport, from a heartbeat.
  void RecordTransportsLocked(WorkerRecord& w, const HeartbeatReport& r) SLUICE_REQUIRES(mu_);
  // A departing worker's counters (caches, transports) join the totals.
  void RetireCachesLocked(const WorkerRecord& w, const std::string& stage) SLUICE_REQUIRES(mu_);
  // A stage that failed with kNotFound on a cached input: runs the stage
  // that produced the input again (bounded by max_cache_reruns) and says so.
  bool RerunOnEvictedInputLocked(JobRecord& j, const FailedReport& r, TimePoint now)
      SLUICE_REQUIRES(mu_);
  // Writes `j.saved` to the journal (failures are logged: the job runs on).
  void SaveProgressLocked(JobRecord& j) SLUICE_REQUIRES(mu_);
  // Finished jobs from the journal, queryable again after a restart.
  Status RestoreFinishedLocked() SLUICE_REQUIRES(mu_);
  // Kept checkpoint steps from the journal onto the jobs restored, with
  // the time they were reported; a journal that cannot be read is logged.
  void RestoreKeptLocked(TimePoint now) SLUICE_REQUIRES(mu_);
  // Records step `step` of a keeping job, in the journal too (once).
  void KeepLocked(JobRecord& j, int step, TimePoint now) SLUICE_REQUIRES(mu_);
  // Drops finished jobs past result_ttl; prunes the journal's now and then.
  void ExpireFinishedLocked(TimePoint now) SLUICE_REQUIRES(mu_);
  std::vector<PoolLoad> PoolLoadsLocked() SLUICE_REQUIRES(mu_);

  ServiceOptions options_;
  JobJournal* journal_;
  ResultDir* results_;
  // Journal writes decided under mu_, written after it (WriteJournal);
  // batches are taken and written under journal_write_mu_, never with mu_
  // held.
  std::unique_ptr<JournalOutbox> outbox_;
  Mutex journal_write_mu_;
  Mutex mu_;
  // Submissions between their checks and their entry (a concurrent
  // journal's Add runs outside the lock): counted against the queue bound.
  std::size_t journaling_ SLUICE_GUARDED_BY(mu_) = 0;
  CondVar cv_;  // Job status and events changed.
  Scheduler scheduler_ SLUICE_GUARDED_BY(mu_);
  Autoscaler autoscaler_ SLUICE_GUARDED_BY(mu_);
  TimePoint next_autoscale_ SLUICE_GUARDED_BY(mu_);
  std::vector<PoolRecommendation> recommendations_ SLUICE_GUARDED_BY(mu_);
  std::map<JobId, JobRecord> jobs_ SLUICE_GUARDED_BY(mu_);
  std::deque<JobId> finished_order_ SLUICE_GUARDED_BY(mu_);  // Oldest finished first.
  TimePoint next_prune_ SLUICE_GUARDED_BY(mu_);              // Of the journal's finished jobs.
  WorkerRegistry registry_ SLUICE_GUARDED_BY(mu_);
  std::map<WorkerId, WorkerRecord> workers_ SLUICE_GUARDED_BY(mu_);  // Their links; same ids.
  PayloadLedger payloads_ SLUICE_GUARDED_BY(mu_);                    // Stage outputs' store keys.
  std::map<std::string, std::int64_t> model_declared_unix_s_ SLUICE_GUARDED_BY(mu_);
  // Per model: the default sizes its workers declared ("": none), and
  // whether one declared reading a request's picture.
  struct ModelSizes {
    std::string image, video;
    bool picture = false;
  };
  std::map<std::string, ModelSizes> model_sizes_ SLUICE_GUARDED_BY(mu_);
  std::map<std::string, EncoderDecl> encoders_ SLUICE_GUARDED_BY(mu_);  // Per model.
  // Cache counters of workers no longer registered.
  std::map<std::string, cache::CacheStats> retired_caches_ SLUICE_GUARDED_BY(mu_);
  WorkerInstances instances_ SLUICE_GUARDED_BY(mu_);  // Each worker process's current registration.
  std::map<std::pair<std::string, std::string>, TransportBytes> retired_transports_
      SLUICE_GUARDED_BY(mu_);
  JobWatchers watchers_ SLUICE_GUARDED_BY(mu_);
  CheckpointKeeper checkpoints_ SLUICE_GUARDED_BY(mu_);  // Steps of keep_checkpoints jobs.
  std::unordered_map<std::string, JobId> names_ SLUICE_GUARDED_BY(mu_);   // Public id -> job.
  std::map<std::string, std::size_t> unfinished_ SLUICE_GUARDED_BY(mu_);  // Per tenant.
  JobId next_job_ SLUICE_GUARDED_BY(mu_) = 1;
  ServiceStats stats_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_ORCHESTRATOR_STATE_H_
