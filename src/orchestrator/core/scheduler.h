// The orchestrator core: a deterministic state machine that turns events
// (jobs submitted, workers appearing with credits, stages finishing or
// failing, workers lost, cancellations, time passing) into actions
// (dispatch this stage of this job to that worker; tell a worker to stop;
// a job finished or failed). No I/O and no threads: the service and the
// simulator drive the same code, and tests drive it with a fake clock.
//
// Queues are asymmetric. Encode and decode are work queues: any worker of
// the pool takes the next item. Denoise is an admission queue: an admitted
// job stays on its worker until it finishes, fails or is cancelled, and it
// is admitted only with a decode slot reserved for its latent, so a slow
// decode pool holds denoise back before latents pile up.
//
// Order within a stage: priority class (interactive > standard > batch),
// earliest deadline first within a class (no deadline sorts last), then
// fair share across tenants, then submission order. Fair share is start-
// time fair queuing per (stage, class) queue: a job entering the queue is
// tagged one past the later of its tenant's last tag and the tag last
// dispatched from that queue, so tenants take turns and a tenant that
// floods the queue waits behind its own jobs, not in front of others'. With
// one tenant this is submission order. A queued item is promoted one class for every
// `aging_step` it has waited, so batch work never starves. Both the order
// across classes and the choice of worker come from a SchedulingPolicy
// (policy.h); DefaultPolicy implements the rules above.
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
#include <unordered_map>
#include <vector>

#include "sluice/status.h"

#include "orchestrator/core/policy.h"

namespace sluice::orchestrator {

enum class Stage : std::uint8_t { kEncode = 0, kDenoise = 1, kDecode = 2 };
inline constexpr int kStageCount = 3;

std::string_view StageName(Stage s);

struct JobSpec {
  JobId id = 0;  // Chosen by the caller; unique.
  // Stages in order. Default encode -> denoise -> decode; encode-only and
  // other shapes are allowed (each stage at most once, in pipeline order).
  std::vector<Stage> pipeline = {Stage::kEncode, Stage::kDenoise, Stage::kDecode};
  PriorityClass priority = PriorityClass::kStandard;
  std::optional<TimePoint> deadline;  // SLO: earliest deadline first in its class.
  // Preferred worker label (e.g. "node=a", where the job's input payload
  // lives); a free worker carrying it is chosen over others.
  std::string affinity;
  std::string tenant;  // Fair share within its class ("": the one tenant).
  // A job taken back after an orchestrator restart: the index in `pipeline`
  // of the first stage to run (the earlier ones' outputs survived), and the
  // checkpointed step that stage resumes from (0: from the start).
  std::size_t start_stage = 0;
  int resume_step = 0;
};

struct SchedulerOptions {
  std::chrono::milliseconds aging_step{30000};  // Wait that promotes one class.
  int max_attempts = 3;                         // Per stage, counting the first.
  std::size_t max_queued_jobs = 1 << 20;        // Submit beyond: kResourceExhausted.
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
  Stage stage = Stage::kEncode;
  WorkerId worker = 0;
  std::string reason;
  int resume_step = 0;  // kDispatch of denoise: continue from this checkpointed step.
};

struct SchedulerStats {
  std::size_t queued[kStageCount] = {};
  std::size_t queued_by_class[kStageCount][kClassCount] = {};
  std::size_t free_slots[kStageCount] = {};  // Credits the workers advertise, unassigned.
  std::size_t running = 0;
  std::size_t jobs = 0;
  std::size_t decode_reserved = 0;
  std::uint64_t dispatches = 0;
  std::uint64_t preemptions = 0;
};

class Scheduler {
 public:
  // `policy` decides dispatch order across classes and worker choice; null
  // means DefaultPolicy(options.aging_step).
  explicit Scheduler(SchedulerOptions options = {},
                     std::unique_ptr<SchedulingPolicy> policy = nullptr);

  // Errors: kInvalidArgument (id 0, empty or malformed pipeline, a start
  // stage past its end, a negative resume step); kAlreadyExists (id in use); kResourceExhausted
  // (max_queued_jobs: the service answers 429).
  Status Submit(const JobSpec& spec, TimePoint now);
  // A worker of `stage` with `capacity` slots joins (or rejoins: its
  // assignments are kept). Errors: kInvalidArgument (id 0, capacity < 1).
  Status WorkerUp(WorkerId worker, Stage stage, int capacity, TimePoint now,
                  std::vector<std::string> labels = {});
  // The worker's own count of free slots; clamped to what the scheduler
  // knows is unassigned. Errors: kNotFound.
  Status Credits(WorkerId worker, int free_slots, TimePoint now);
  // The worker is draining: it finishes what it runs and takes nothing
  // new, so it gets no further assignment, even for the slots its reports
  // give back. Idempotent. Errors: kNotFound.
  Status Draining(WorkerId worker, TimePoint now);
  // `job`'s current stage finished on `worker`; the next stage is queued.
  // Errors: kNotFound (unknown job/worker); kFailedPrecondition (the job is
  // not running that stage on that worker: a stale or duplicate report).
  Status StageDone(JobId job, WorkerId worker, TimePoint now);
  // The stage failed. Retryable failures re-queue it (at the head) until
  // max_attempts; otherwise the job fails. Errors as StageDone.
  Status StageFailed(JobId job, WorkerId worker, std::string_view reason, bool retryable,
                     TimePoint now);
  // A running stage reached `step`; `checkpointed` says a checkpoint of that
  // step is stored (a lost or preempted denoise job resumes from it).
  // Errors as StageDone.
  Status Progress(JobId job, WorkerId worker, int step, bool checkpointed, TimePoint now);
  // The worker yielded `job` after a kCheckpoint request (its latest
  // checkpoint was reported by Progress). The job is re-queued at the head.
  // Errors as StageDone.
  Status Preempted(JobId job, WorkerId worker, TimePoint now);
  // Every assignment of the worker goes back to the head of its queue;
  // denoise jobs resume from their latest checkpoint. Errors: kNotFound.
  Status WorkerLost(WorkerId worker, TimePoint now);
  // The output of `producer` for `job` was lost (the store announced it).
  // If the job still needs it, the producing stage runs again: at once when
  // the consumer is only queued; when the consumer is running, after it
  // reports failure (that failure does not count as an attempt). Errors:
  // kNotFound (unknown job); kInvalidArgument (`producer` is not a stage of
  // the job that has already run).
  Status PayloadLost(JobId job, Stage producer, TimePoint now);
  // Removes queued work, stops running work, releases the job's payloads.
  // Errors: kNotFound (unknown or already finished job).
  Status Cancel(JobId job, TimePoint now);
  // Time passes: aging may reorder queues; dispatches what it can.
  void Tick(TimePoint now);

  // Actions since the last call, in the order decided.
  std::vector<Action> TakeActions();
  SchedulerStats Stats() const;

 private:
  struct QueueKey {
    std::int64_t deadline_ns;  // INT64_MAX when none.
    std::uint64_t fair;        // Fair-share tag (0: re-queued at the head).
    std::uint64_t seq;         // Lower: queued earlier (or re-queued at the head).
    JobId job;
    auto operator<=>(const QueueKey&) const = default;
  };
  struct Job {
    JobSpec spec;
    std::size_t stage_index = 0;
    bool running = false;
    bool cancelled = false;  // Stopped; waits for its worker's report.
    bool decode_reserved = false;
    int attempts = 0;  // Of the current stage.
    TimePoint queued_at;
    std::optional<QueueKey> key;
    WorkerId worker = 0;
    int checkpoint_step = 0;                // Latest checkpointed step of the current stage.
    bool preempting = false;                // Asked to checkpoint and yield.
    std::optional<std::size_t> rerun_from;  // Producer to re-run after the running stage.

    Stage stage() const { return spec.pipeline[stage_index]; }
    bool NeedsDecodeAfter() const {
      return std::find(spec.pipeline.begin() + static_cast<std::ptrdiff_t>(stage_index),
                       spec.pipeline.end(), Stage::kDecode) != spec.pipeline.end();
    }
  };

  struct Worker {
    WorkerId id = 0;
    Stage stage = Stage::kEncode;
    int capacity = 0;
    int free = 0;
    std::vector<std::string> labels;
    std::set<JobId> assigned;
    bool draining = false;  // No free slot, ever again.
  };

  using Queue = std::set<QueueKey>;

  void Enqueue(Job& job, bool at_head, TimePoint now);
  void Dequeue(Job& job);
  void Dispatch(TimePoint now);
  bool DispatchOne(Stage stage, TimePoint now);
  Job* PickNext(Stage stage, TimePoint now);
  Worker* PickWorker(Stage stage, const Job& job);
  QueuedView View(const Job& job) const;
  void Preempt(TimePoint now);
  void Stopped(Job& job);  // Bookkeeping when a job stops running.
  void SetFree(Worker& w, int free);
  void Release(Job& job, Worker& w);
  Status CheckRunning(JobId job, WorkerId worker, Job** j, Worker** w);
  // Ends `job`'s assignment on `worker` (its slot returns). Null when the job
  // was cancelled (it is finished here); errors as CheckRunning.
  Result<Job*> EndAssignment(JobId job, WorkerId worker);
  void Finish(Job& job, bool ok, std::string reason);

  SchedulerOptions options_;
  std::unique_ptr<SchedulingPolicy> policy_;
  std::unordered_map<JobId, Job> jobs_;
  std::unordered_map<WorkerId, Worker> workers_;
  Queue queues_[kStageCount][kClassCount];
  // Fair share per queue: the tag last dispatched, and each tenant's last
  // tag (dropped once the queue's time passes it).
  struct FairClock {
    std::uint64_t now = 0;
    std::unordered_map<std::string, std::uint64_t> last;
  };
  FairClock fair_[kStageCount][kClassCount];
  // Workers with free slots per stage, most free first: (-free, id).
  std::set<std::pair<int, WorkerId>> free_[kStageCount];
  int total_free_[kStageCount] = {};
  // Free workers per stage and label, most free first.
  std::unordered_map<std::string, std::set<std::pair<int, WorkerId>>> free_by_label_[kStageCount];
  std::size_t preempting_ = 0;
  std::set<JobId> running_batch_denoise_;  // Preemption candidates.
  std::uint64_t preemptions_ = 0;
  std::uint64_t next_seq_ = 1ull << 62;  // Head re-queues count down from here.
  std::uint64_t next_head_seq_ = (1ull << 62) - 1;
  std::size_t decode_reserved_ = 0;
  std::uint64_t dispatches_ = 0;
  std::vector<Action> actions_;
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_SCHEDULER_H_
