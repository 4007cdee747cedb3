// The orchestrator core: a deterministic state machine that turns events
// (jobs submitted, workers appearing with credits, stages finishing or
// failing, workers lost, cancellations, time passing) into actions
// (dispatch this stage of this job to that worker; tell a worker to stop;
// a job finished or failed). No I/O and no threads: the service and the
// simulator drive the same code, and tests drive it with a fake clock.
//
// Work is kept per pool: one (model, stage) pair. A job runs only on
// workers of its own model (a constraint, never a preference); a worker
// may serve several models, and then sits in each of their pools for its
// stage. Pools are asymmetric by their stage's kind (model.h). Work stages
// are work queues: any worker of the pool takes the next item. Admission
// stages (denoise, typically) are admission queues: an admitted job stays
// on its worker until it finishes, fails or is cancelled, and it is
// admitted only with a slot reserved in its next stage for its output, so
// a slow downstream pool (decode) holds admission back before outputs
// pile up. Interactive work waiting at a full admission pool preempts
// batch work there (checkpoint and yield).
//
// Order within a pool: priority class (interactive > standard > batch),
// earliest deadline first within a class (no deadline sorts last), then
// fair share across tenants, then submission order. Fair share is start-
// time fair queuing per (pool, class) queue: a job entering the queue is
// tagged one past the later of its tenant's last tag and the tag last
// dispatched from that queue, so tenants take turns and a tenant that
// floods the queue waits behind its own jobs, not in front of others'. With
// one tenant this is submission order. A queued item is promoted one class for every
// `aging_step` it has waited, so batch work never starves. Pools compete
// for shared workers by the same rules: the class heads of every pool at
// one distance from its pipeline's end are compared by the policy, and the
// pools nearest the end go first (finishing work frees the pipeline). Both
// the order across classes and the choice of worker come from a
// SchedulingPolicy (policy.h); DefaultPolicy implements the rules above.
//
// Credits: a worker takes at most `capacity` items; the scheduler never
// dispatches beyond the free slots it knows of (a worker's own report can
// lower them, never raise them above capacity minus what is assigned).
//
// Not thread-safe: one owner calls it.
#ifndef SLUICE_ORCHESTRATOR_CORE_SCHEDULER_H_
#define SLUICE_ORCHESTRATOR_CORE_SCHEDULER_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "sluice/status.h"

#include "orchestrator/core/model.h"
#include "orchestrator/core/policy.h"

namespace sluice::orchestrator {

using PoolId = std::uint32_t;

struct JobSpec {
  JobId id = 0;       // Chosen by the caller; unique.
  std::string model;  // A declared model; its workers alone run the job.
  // The stages to run, by name, in the model's order (each at most once);
  // empty: every stage of the model.
  std::vector<std::string> pipeline;
  PriorityClass priority = PriorityClass::kStandard;
  std::optional<TimePoint> deadline;  // SLO: earliest deadline first in its class.
  // Preferred worker label (e.g. "node=a", where the job's input payload
  // lives); a free worker carrying it is chosen over others.
  std::string affinity;
  // Jobs of one key can run in one batch (the same model, shape and step
  // schedule; "" : none). With no idle worker in its pool, a free worker
  // already running jobs of the job's key at this stage is chosen over
  // one that is not, so a batching worker's batch fills with compatible
  // jobs; an idle worker still goes first (a batch of one steps fastest).
  std::string batch_key;
  std::string tenant;  // Fair share within its class ("": the one tenant).
  // A job taken back after an orchestrator restart: the index in its
  // pipeline of the first stage to run (the earlier ones' outputs survived),
  // and the checkpointed step that stage resumes from (0: from the start).
  std::size_t start_stage = 0;
  int resume_step = 0;
};

struct WorkerSpec {
  std::vector<std::string> models;  // Declared models with `stage`; at least one.
  std::string stage;
  int capacity = 1;
  std::vector<std::string> labels;
  // The lease of its assignments, as its model's profile sets it (a
  // denoise step or a whole encode/decode is expected well within it);
  // 0: SchedulerOptions::assignment_timeout.
  std::chrono::milliseconds assignment_timeout{0};
};

// The longest wait before a retry, however many attempts came before.
inline constexpr std::chrono::milliseconds kMaxRetryBackoff{30000};

struct SchedulerOptions {
  std::chrono::milliseconds aging_step{30000};  // Wait that promotes one class.
  int max_attempts = 3;                         // Per stage, counting the first.
  // A retryable failure's next attempt waits retry_backoff, doubling with
  // each attempt (capped at kMaxRetryBackoff): a failure caused by a peer
  // that is dying (a store node the master has not yet declared lost)
  // outlasts the detection instead of spending every attempt in
  // milliseconds. Zero: at once. A lost worker's or lapsed lease's work
  // is re-queued at once either way (the cause is gone).
  std::chrono::milliseconds retry_backoff{0};
  // An assignment's lease: a worker that reports no progress on it for
  // this long (Progress renews it) loses it — the work is re-queued on
  // another worker first, the lapse counts as an attempt, and the worker is
  // told to stop. Zero: no leases.
  std::chrono::milliseconds assignment_timeout{600000};
  std::size_t max_queued_jobs = 1 << 20;  // Submit beyond: kResourceExhausted.
  // Admission into a stage that reserves its output a slot downstream
  // (denoise -> decode): 0 admits a job only while a downstream slot is
  // free and unreserved, so at most as many jobs run the admission stage
  // as the next pool has slots (a fast decode pool of M slots caps denoise
  // at M jobs). k > 0 admits while the jobs holding reservations are fewer
  // than k times the next pool's slots, busy or free: outputs that may
  // pile up downstream stay bounded while a small decode pool serves a
  // large denoise pool (N:M sharing). Reservations are counted alike.
  double admission_overcommit = 0;
};

struct Action {
  enum class Kind : std::uint8_t {
    kDispatch,  // Run `stage` of `job` on `worker`.
    kStop,      // Tell `worker` to stop `job` at its next step boundary.
    kJobDone,
    kJobFailed,   // `reason` says why.
    kReleaseJob,  // Every payload of `job` may be freed.
    kCheckpoint,  // Tell `worker` to checkpoint `job` at its next step and yield it.
  };
  Kind kind;
  JobId job = 0;
  std::string stage;  // The job's stage the action is about.
  WorkerId worker = 0;
  std::string reason;
  int resume_step = 0;  // kDispatch of an admission stage: continue from this checkpointed step.
};

struct PoolStats {
  std::string model, stage;
  StageKind kind = StageKind::kWork;
  std::size_t queued = 0;
  std::size_t queued_by_class[kClassCount] = {};
  std::size_t free_slots = 0;  // Credits its workers advertise, unassigned.
  std::size_t workers = 0;     // Registered and not draining.
  std::size_t slots = 0;       // Their capacity, busy or free.
  std::size_t reserved = 0;    // Slots held for jobs admitted upstream.
};

struct SchedulerStats {
  std::vector<PoolStats> pools;  // Every declared (model, stage), in model order.
  std::size_t running = 0;
  std::size_t jobs = 0;
  std::size_t reserved = 0;  // Downstream slots held by admitted jobs, all pools.
  std::uint64_t dispatches = 0;
  std::uint64_t preemptions = 0;
};

class Scheduler {
 public:
  // `policy` decides dispatch order across classes and worker choice; null
  // means DefaultPolicy(options.aging_step).
  explicit Scheduler(SchedulerOptions options = {},
                     std::unique_ptr<SchedulingPolicy> policy = nullptr);

  // Declares a model and its pipeline; its pools exist from now on (jobs
  // queue there before any worker comes). Declaring it again with the same
  // stages is a no-op. Errors: kInvalidArgument (ValidateModel);
  // kAlreadyExists (declared with other stages; the message names both).
  Status DeclareModel(const ModelSpec& model);
  // The declared model named `name`; null if none. Valid until the next
  // DeclareModel.
  const ModelSpec* FindModel(std::string_view name) const;
  // Every declared model, in name order.
  std::vector<const ModelSpec*> Models() const;
  // Workers taking new work for each stage of declared model `name`, in
  // stage order (empty if undeclared): registered and not draining (a
  // draining or quarantined worker finishes what it holds, takes nothing).
  std::vector<std::size_t> WorkersPerStage(std::string_view name) const;

  // Errors: kNotFound (undeclared model); kInvalidArgument (id 0, a stage
  // the model lacks, stages out of the model's order or repeated, a start
  // stage past the end, a negative resume step); kAlreadyExists (id in
  // use); kResourceExhausted (max_queued_jobs: the service answers 429).
  Status Submit(const JobSpec& spec, TimePoint now);
  // A worker of `spec.stage` for `spec.models` with `spec.capacity` slots
  // joins (or rejoins with the same stage and models: its assignments are
  // kept). Errors: kInvalidArgument (id 0, capacity < 1, no model, a
  // rejoin with another stage or models); kNotFound (an undeclared model,
  // or one without that stage).
  Status WorkerUp(WorkerId worker, WorkerSpec spec, TimePoint now);
  // The worker's own count of free slots; clamped to what the scheduler
  // knows is unassigned. Errors: kNotFound.
  Status Credits(WorkerId worker, int free_slots, TimePoint now);
  // The worker is draining: it finishes what it runs and takes nothing
  // new, so it gets no further assignment, even for the slots its reports
  // give back. Idempotent. Errors: kNotFound.
  Status Draining(WorkerId worker, TimePoint now);
  // The worker now holds something jobs may name by `label` as their
  // affinity (e.g. "adapter=DIGEST": a LoRA adapter it loaded): a free
  // worker with it is preferred for them, as with its registered labels.
  // At most kMaxLearnedLabels are kept per worker, the oldest forgotten
  // first (workers drop what they hold least recently used, too); a label
  // it has already becomes the newest. Errors: kNotFound.
  static constexpr std::size_t kMaxLearnedLabels = 16;
  Status LearnLabel(WorkerId worker, const std::string& label);
  // The worker says what it holds now (`held`, newest first, e.g. after a
  // run): its learned labels become exactly these (the newest
  // kMaxLearnedLabels), so jobs stop being drawn to what it dropped; its
  // registered labels stay. Errors: kNotFound.
  Status SetLearnedLabels(WorkerId worker, const std::vector<std::string>& held);

  // `job`'s current stage finished on `worker`; the next stage is queued.
  // Errors: kNotFound (unknown job/worker); kFailedPrecondition (the job is
  // not running that stage on that worker: a stale or duplicate report).
  Status StageDone(JobId job, WorkerId worker, TimePoint now);
  // The stage failed. Retryable failures re-queue it (at the head) until
  // max_attempts, to run on another worker of the pool when one is free
  // (the same one only when it is the only one free), after the options'
  // retry_backoff (Tick queues it when due); otherwise the job fails.
  // Errors as StageDone.
  Status StageFailed(JobId job, WorkerId worker, std::string_view reason, bool retryable,
                     TimePoint now);
  // A running stage reached `step`; `checkpointed` says a checkpoint of that
  // step is stored (a lost or preempted denoise job resumes from it). Renews
  // the assignment's lease. Errors as StageDone.
  Status Progress(JobId job, WorkerId worker, int step, bool checkpointed, TimePoint now);
  // The worker yielded `job` after a kCheckpoint request (its latest
  // checkpoint was reported by Progress). The job is re-queued at the head.
  // Errors as StageDone.
  Status Preempted(JobId job, WorkerId worker, TimePoint now);
  // Every assignment of the worker goes back to the head of its queue;
  // admission-stage jobs resume from their latest checkpoint. Errors:
  // kNotFound.
  Status WorkerLost(WorkerId worker, TimePoint now);
  // The jobs assigned to `worker` now (none for an unknown worker).
  std::vector<JobId> AssignedTo(WorkerId worker) const;
  // The output of `producer` for `job` was lost (the store announced it).
  // If the job still needs it, the producing stage runs again: at once when
  // the consumer is only queued; when the consumer is running, after it
  // reports failure (that failure does not count as an attempt). Errors:
  // kNotFound (unknown job); kInvalidArgument (`producer` is not a stage of
  // the job that has already run).
  Status PayloadLost(JobId job, std::string_view producer, TimePoint now);
  // Removes queued work, stops running work, releases the job's payloads.
  // Errors: kNotFound (unknown or already finished job).
  Status Cancel(JobId job, TimePoint now);
  // Time passes: retries whose backoff is over are queued; expired leases are taken back (kStop to
  // the worker, with `reason` "lease expired"); aging may reorder queues; dispatches what it can.
  void Tick(TimePoint now);

  // Actions since the last call, in the order decided.
  std::vector<Action> TakeActions();
  SchedulerStats Stats() const;
  // Stats().jobs alone: jobs in the system (Submit refuses past
  // max_queued_jobs).
  std::size_t JobCount() const { return jobs_.size(); }
  // Stats().pools alone: no walk over the jobs (cheap enough for every
  // tick, e.g. the autoscaler's samples).
  std::vector<PoolStats> PoolsNow() const;

 private:
  struct QueueKey {
    std::int64_t deadline_ns;  // INT64_MAX when none.
    std::uint64_t fair;        // Fair-share tag (0: re-queued at the head).
    std::uint64_t seq;         // Lower: queued earlier (or re-queued at the head).
    JobId job;
    auto operator<=>(const QueueKey&) const = default;
  };
  using Queue = std::set<QueueKey>;
  // Most free first, then the earliest registered: (-free, Worker::seq,
  // id). Not by id: ids are random, and which of two idle workers a stage
  // goes to should not be.
  using FreeSet = std::set<std::tuple<int, std::uint64_t, WorkerId>>;
  // Fair share per queue: the tag last dispatched, and each tenant's last
  // tag (dropped once the queue's time passes it).
  struct FairClock {
    std::uint64_t now = 0;
    std::unordered_map<std::string, std::uint64_t> last;
  };
  struct Pool {
    std::string model, stage;
    StageKind kind = StageKind::kWork;
    std::size_t distance_to_end = 0;  // 0: the model's last stage.
    Queue queues[kClassCount];
    // The queued jobs that already hold the downstream slot their
    // admission here needs (re-queued after their worker was lost), keyed
    // as in `queues`: QueuedHolder finds the best without walking a queue.
    Queue holders[kClassCount];
    FairClock fair[kClassCount];
    FreeSet free;  // Its workers with free slots.
    int total_free = 0;
    std::unordered_map<std::string, FreeSet> free_by_label;
    std::size_t workers = 0;
    int slots = 0;                  // Capacity of its workers that take work (busy or free).
    std::size_t reserved = 0;       // Slots held for jobs admitted upstream.
    std::size_t preempting = 0;     // Jobs asked to yield for this pool's waiting work.
    std::set<JobId> running_batch;  // Batch jobs on its workers: preemption candidates.
  };
  struct Job {
    JobSpec spec;
    std::vector<PoolId> pools;  // Its pipeline.
    std::size_t stage_index = 0;
    bool running = false;
    bool cancelled = false;             // Stopped; waits for its worker's report.
    std::optional<PoolId> reserved_in;  // A slot held in this (downstream) pool.
    int attempts = 0;                   // Of the current stage.
    TimePoint queued_at;
    std::optional<QueueKey> key;
    WorkerId worker = 0;
    WorkerId avoid = 0;                   // Its stage failed there: another free worker goes first.
    int checkpoint_step = 0;              // Latest checkpointed step of the current stage.
    std::optional<PoolId> preempted_for;  // Asked to checkpoint and yield for this pool.
    std::optional<std::size_t> rerun_from;  // Producer to re-run after the running stage.
    std::optional<TimePoint> lease_until;   // While running, with leases on.
    // Waiting out a retry's backoff: neither queued nor running.
    std::optional<TimePoint> retry_at;

    PoolId pool() const { return pools[stage_index]; }
  };
  struct Worker {
    WorkerId id = 0;
    std::vector<std::string> models;
    std::string stage;
    std::vector<PoolId> pools;  // One per model.
    int capacity = 0;
    int free = 0;
    std::vector<std::string> labels;
    std::deque<std::string> learned;  // LearnLabel's, oldest first (also in labels).
    std::set<JobId> assigned;
    std::uint64_t seq = 0;                            // Registration order.
    bool draining = false;                            // No free slot, ever again.
    std::chrono::milliseconds assignment_timeout{0};  // 0: the options' default.
  };
  struct ModelEntry {
    ModelSpec spec;
    std::vector<PoolId> pools;  // One per stage, in order.
  };

  Status ResolvePipeline(const JobSpec& spec, std::vector<PoolId>* pools) const;
  void Enqueue(Job& job, bool at_head, TimePoint now);
  void Dequeue(Job& job);
  void Dispatch(TimePoint now);
  // Dispatches the best head among `pools` (which may share workers); false
  // when none can go.
  bool DispatchBest(const std::vector<PoolId>& pools, std::vector<bool>& blocked, TimePoint now);
  bool DispatchOne(PoolId pool, Job& job, TimePoint now);
  Job* PickNext(const Pool& pool, TimePoint now);
  // A free worker of `pool` (other than the job's `avoid`) running jobs of
  // `job`'s batch key at its stage, when `freest` (the freest free one) is
  // neither idle nor running one of them; null otherwise.
  const Worker* BatchCompatible(const Pool& pool, const Job& job, WorkerId freest) const;
  // A job queued in `pool` that already holds the downstream slot its
  // admission needs (re-queued after its worker was lost), best class
  // first, then queue order; null when none. O(classes).
  Job* QueuedHolder(const Pool& pool);
  Worker* PickWorker(Pool& pool, const Job& job);
  // The pool `job` reserves a slot in when admitted at its current stage.
  std::optional<PoolId> ReservationFor(const Job& job) const;
  QueuedView View(const Job& job) const;
  void Preempt(PoolId pool);
  void Unreserve(Job& job);
  void Stopped(Job& job, const std::vector<PoolId>& worker_pools);  // A job stops running.
  void SetFree(Worker& w, int free);
  void Lease(Job& job, TimePoint now);  // Starts or renews; a no-op with leases off.
  void Unlease(Job& job);
  void ExpireLeases(TimePoint now);
  // Queues (at the head) the jobs whose retry backoff ended by `now`.
  void QueueDueRetries(TimePoint now);
  void Release(Job& job, Worker& w);
  Status CheckRunning(JobId job, WorkerId worker, Job** j, Worker** w);
  // Ends `job`'s assignment on `worker` (its slot returns). Null when the job
  // was cancelled (it is finished here); errors as CheckRunning.
  Result<Job*> EndAssignment(JobId job, WorkerId worker);
  void Finish(Job& job, bool ok, std::string reason);
  const std::string& StageOf(const Job& job) const { return pools_[job.pool()]->stage; }

  SchedulerOptions options_;
  std::unique_ptr<SchedulingPolicy> policy_;
  std::unordered_map<JobId, Job> jobs_;
  // Jobs waiting out a retry's backoff, by when they queue again. Entries
  // whose job was cancelled or re-queued since are skipped (the job's
  // retry_at no longer matches).
  std::multimap<TimePoint, JobId> retries_;
  std::unordered_map<WorkerId, Worker> workers_;
  std::uint64_t next_worker_seq_ = 1;
  std::map<std::string, ModelEntry, std::less<>> models_;
  std::vector<std::unique_ptr<Pool>> pools_;  // PoolId indexes; never shrinks.
  // Pools grouped by distance to their pipeline's end, nearest first.
  std::vector<std::vector<PoolId>> by_distance_;
  std::vector<bool> blocked_;
  std::set<std::pair<TimePoint, JobId>> leases_;  // Running assignments by lease end.  // Per pool,
                                                  // during one Dispatch: its head cannot go.
  std::uint64_t preemptions_ = 0;
  std::uint64_t next_seq_ = 1ull << 62;  // Head re-queues count down from here.
  std::uint64_t next_head_seq_ = (1ull << 62) - 1;
  std::size_t reserved_ = 0;
  std::uint64_t dispatches_ = 0;
  std::vector<Action> actions_;
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_SCHEDULER_H_
