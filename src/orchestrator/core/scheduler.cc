#include "orchestrator/core/scheduler.h"

#include <algorithm>

namespace sluice::orchestrator {

std::string_view StageName(Stage s) {
  switch (s) {
    case Stage::kEncode:
      return "encode";
    case Stage::kDenoise:
      return "denoise";
    case Stage::kDecode:
      return "decode";
  }
  return "unknown";
}

namespace {
int Idx(Stage s) {
  return static_cast<int>(s);
}
}  // namespace

Scheduler::Scheduler(SchedulerOptions options, std::unique_ptr<SchedulingPolicy> policy)
    : options_(options),
      policy_(policy != nullptr ? std::move(policy)
                                : std::make_unique<DefaultPolicy>(options.aging_step)) {}

QueuedView Scheduler::View(const Job& job) const {
  return QueuedView{job.spec.id,
                    job.spec.priority,
                    job.spec.deadline,
                    job.queued_at,
                    job.key.has_value() ? job.key->seq : 0,
                    job.spec.affinity};
}

Status Scheduler::Submit(const JobSpec& spec, TimePoint now) {
  if (spec.id == 0) {
    return InvalidArgumentError("Submit: job id 0 is reserved");
  }
  if (spec.pipeline.empty()) {
    return InvalidArgumentError("Submit: empty pipeline");
  }
  for (std::size_t i = 1; i < spec.pipeline.size(); ++i) {
    if (Idx(spec.pipeline[i]) <= Idx(spec.pipeline[i - 1])) {
      return InvalidArgumentError(
          "Submit: pipeline stages must run in encode, denoise, decode "
          "order, each at most once");
    }
  }
  if (static_cast<int>(spec.priority) >= kClassCount) {
    return InvalidArgumentError("Submit: unknown priority class");
  }
  if (spec.start_stage >= spec.pipeline.size()) {
    return InvalidArgumentError("Submit: start stage " + std::to_string(spec.start_stage) +
                                " is past the pipeline's " + std::to_string(spec.pipeline.size()) +
                                " stage(s)");
  }
  if (spec.resume_step < 0) {
    return InvalidArgumentError("Submit: negative resume step");
  }
  if (jobs_.count(spec.id) != 0) {
    return AlreadyExistsError("Submit: job " + std::to_string(spec.id) + " exists");
  }
  if (jobs_.size() >= options_.max_queued_jobs) {
    return ResourceExhaustedError("Submit: " + std::to_string(jobs_.size()) +
                                  " jobs in the system; retry later");
  }
  Job& job = jobs_[spec.id];
  job.spec = spec;
  job.stage_index = spec.start_stage;
  job.checkpoint_step = spec.resume_step;
  Enqueue(job, false, now);
  Dispatch(now);
  return Status::Ok();
}

Status Scheduler::WorkerUp(WorkerId id, Stage stage, int capacity, TimePoint now,
                           std::vector<std::string> labels) {
  if (id == 0 || capacity < 1) {
    return InvalidArgumentError("WorkerUp: worker id must be non-zero and capacity >= 1");
  }
  auto [it, fresh] = workers_.try_emplace(id);
  Worker& w = it->second;
  if (!fresh && w.stage != stage) {
    return InvalidArgumentError("WorkerUp: worker " + std::to_string(id) + " serves " +
                                std::string(StageName(w.stage)) + ", not " +
                                std::string(StageName(stage)));
  }
  SetFree(w, 0);  // Re-indexed below under its (possibly new) labels.
  w.id = id;
  w.stage = stage;
  w.capacity = capacity;
  w.labels = std::move(labels);
  SetFree(w, std::max(0, capacity - static_cast<int>(w.assigned.size())));
  Dispatch(now);
  return Status::Ok();
}

Status Scheduler::Credits(WorkerId id, int free_slots, TimePoint now) {
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return NotFoundError("Credits: unknown worker " + std::to_string(id));
  }
  Worker& w = it->second;
  const int unassigned = w.capacity - static_cast<int>(w.assigned.size());
  SetFree(w, w.draining ? 0 : std::clamp(free_slots, 0, std::max(0, unassigned)));
  Dispatch(now);
  return Status::Ok();
}

Status Scheduler::Draining(WorkerId id, TimePoint now) {
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return NotFoundError("Draining: unknown worker " + std::to_string(id));
  }
  if (it->second.draining) {
    return Status::Ok();  // Every heartbeat of a draining worker says so.
  }
  it->second.draining = true;
  SetFree(it->second, 0);
  Dispatch(now);  // Preemption may now be due: fewer denoise slots.
  return Status::Ok();
}

void Scheduler::SetFree(Worker& w, int free) {
  std::set<std::pair<int, WorkerId>>& set = free_[Idx(w.stage)];
  auto& by_label = free_by_label_[Idx(w.stage)];
  if (w.free > 0) {
    set.erase({-w.free, w.id});
    for (const std::string& l : w.labels) {
      by_label[l].erase({-w.free, w.id});
    }
  }
  total_free_[Idx(w.stage)] += free - w.free;
  w.free = free;
  if (free > 0) {
    set.insert({-free, w.id});
    for (const std::string& l : w.labels) {
      by_label[l].insert({-free, w.id});
    }
  }
}

void Scheduler::Enqueue(Job& job, bool at_head, TimePoint now) {
  const std::int64_t deadline =
      job.spec.deadline.has_value() ? job.spec.deadline->time_since_epoch().count() : INT64_MAX;
  std::uint64_t fair = 0;
  if (!at_head) {
    FairClock& clock = fair_[Idx(job.stage())][static_cast<int>(job.spec.priority)];
    std::uint64_t& last = clock.last[job.spec.tenant];
    last = std::max(clock.now, last) + 1;
    fair = last;
  }
  job.key = QueueKey{deadline, fair, at_head ? next_head_seq_-- : next_seq_++, job.spec.id};
  job.queued_at = now;
  job.running = false;
  queues_[Idx(job.stage())][static_cast<int>(job.spec.priority)].insert(*job.key);
}

void Scheduler::Dequeue(Job& job) {
  if (job.key.has_value()) {
    queues_[Idx(job.stage())][static_cast<int>(job.spec.priority)].erase(*job.key);
    job.key.reset();
  }
}

Scheduler::Job* Scheduler::PickNext(Stage stage, TimePoint now) {
  Job* best = nullptr;
  QueuedView best_view;
  for (int c = 0; c < kClassCount; ++c) {
    const Queue& q = queues_[Idx(stage)][c];
    if (q.empty()) {
      continue;
    }
    Job& job = jobs_.at(q.begin()->job);
    QueuedView view = View(job);
    if (best == nullptr || policy_->RunsBefore(view, best_view, now)) {
      best = &job;
      best_view = view;
    }
  }
  return best;
}

Scheduler::Worker* Scheduler::PickWorker(Stage stage, const Job& job) {
  const auto& set = free_[Idx(stage)];
  if (set.empty()) {
    return nullptr;
  }
  auto view = [this](WorkerId id) {
    const Worker& w = workers_.at(id);
    return WorkerView{w.id, w.free, w.capacity, &w.labels};
  };
  std::optional<WorkerView> near;
  if (!job.spec.affinity.empty()) {
    auto it = free_by_label_[Idx(stage)].find(job.spec.affinity);
    if (it != free_by_label_[Idx(stage)].end() && !it->second.empty()) {
      near = view(it->second.begin()->second);
    }
  }
  const WorkerView freest = view(set.begin()->second);
  const WorkerId chosen = policy_->ChooseWorker(View(job), near ? &*near : nullptr, freest);
  return &workers_.at(chosen == (near ? near->id : 0) ? near->id : freest.id);
}

bool Scheduler::DispatchOne(Stage stage, TimePoint now) {
  if (total_free_[Idx(stage)] == 0) {
    return false;
  }
  Job* job = PickNext(stage, now);
  if (job == nullptr) {
    return false;
  }
  Worker* w = PickWorker(stage, *job);
  const bool reserve = stage == Stage::kDenoise && job->NeedsDecodeAfter();
  if (reserve && !job->decode_reserved &&
      total_free_[Idx(Stage::kDecode)] <= static_cast<int>(decode_reserved_)) {
    return false;  // No decode slot for its latent: hold denoise back.
  }
  {
    FairClock& clock = fair_[Idx(stage)][static_cast<int>(job->spec.priority)];
    clock.now = std::max(clock.now, job->key->fair);
    if (auto t = clock.last.find(job->spec.tenant);
        t != clock.last.end() && t->second <= clock.now) {
      clock.last.erase(t);  // Caught up: max(now, last) is `now` anyway.
    }
  }
  Dequeue(*job);
  job->running = true;
  if (stage == Stage::kDenoise && job->spec.priority == PriorityClass::kBatch) {
    running_batch_denoise_.insert(job->spec.id);
  }
  job->worker = w->id;
  ++job->attempts;
  w->assigned.insert(job->spec.id);
  SetFree(*w, w->free - 1);
  if (reserve && !job->decode_reserved) {
    job->decode_reserved = true;
    ++decode_reserved_;
  }
  if (stage == Stage::kDecode && job->decode_reserved) {
    job->decode_reserved = false;  // The reservation is used now.
    --decode_reserved_;
  }
  ++dispatches_;
  actions_.push_back(
      Action{Action::Kind::kDispatch, job->spec.id, stage, w->id, {}, job->checkpoint_step});
  return true;
}

void Scheduler::Dispatch(TimePoint now) {
  // Downstream first: finishing work frees the pipeline.
  for (Stage s : {Stage::kDecode, Stage::kDenoise, Stage::kEncode}) {
    while (DispatchOne(s, now)) {
    }
  }
  Preempt(now);
}

// An interactive job waiting for denoise while batch jobs hold every slot:
// ask one batch job per waiting interactive job to checkpoint and yield.
void Scheduler::Preempt(TimePoint now) {
  const Queue& waiting =
      queues_[Idx(Stage::kDenoise)][static_cast<int>(PriorityClass::kInteractive)];
  if (waiting.empty() || total_free_[Idx(Stage::kDenoise)] > 0 || preempting_ >= waiting.size()) {
    return;
  }
  (void)now;
  for (JobId id : running_batch_denoise_) {
    if (preempting_ >= waiting.size()) {
      break;
    }
    Job& job = jobs_.at(id);
    if (!job.cancelled && !job.preempting) {
      job.preempting = true;
      ++preempting_;
      ++preemptions_;
      actions_.push_back(Action{Action::Kind::kCheckpoint, id, Stage::kDenoise, job.worker, {}});
    }
  }
}

Status Scheduler::CheckRunning(JobId job, WorkerId worker, Job** j, Worker** w) {
  auto jit = jobs_.find(job);
  auto wit = workers_.find(worker);
  if (jit == jobs_.end() || wit == workers_.end()) {
    return NotFoundError("unknown job " + std::to_string(job) + " or worker " +
                         std::to_string(worker));
  }
  if (!jit->second.running || jit->second.worker != worker) {
    return FailedPreconditionError("job " + std::to_string(job) + " is not running on worker " +
                                   std::to_string(worker) + " (stale or duplicate report)");
  }
  *j = &jit->second;
  *w = &wit->second;
  return Status::Ok();
}

void Scheduler::Stopped(Job& job) {
  if (job.preempting) {
    job.preempting = false;
    --preempting_;
  }
  running_batch_denoise_.erase(job.spec.id);
  job.running = false;
  job.worker = 0;
}

void Scheduler::Release(Job& job, Worker& w) {
  Stopped(job);
  w.assigned.erase(job.spec.id);
  SetFree(w,
          w.draining ? 0 : std::min(w.free + 1, w.capacity - static_cast<int>(w.assigned.size())));
}

void Scheduler::Finish(Job& job, bool ok, std::string reason) {
  if (job.decode_reserved) {
    --decode_reserved_;
  }
  const JobId id = job.spec.id;
  if (!job.cancelled) {
    actions_.push_back(Action{ok ? Action::Kind::kJobDone : Action::Kind::kJobFailed, id,
                              job.stage(), 0, std::move(reason)});
    if (!ok) {
      actions_.push_back(Action{Action::Kind::kReleaseJob, id, job.stage(), 0, {}});
    }
  }
  jobs_.erase(id);
}

Result<Scheduler::Job*> Scheduler::EndAssignment(JobId id, WorkerId worker) {
  Job* job = nullptr;
  Worker* w = nullptr;
  SLUICE_RETURN_IF_ERROR(CheckRunning(id, worker, &job, &w));
  Release(*job, *w);
  if (job->cancelled) {
    Finish(*job, false, "cancelled");
    return static_cast<Job*>(nullptr);
  }
  return job;
}

Status Scheduler::StageDone(JobId id, WorkerId worker, TimePoint now) {
  SLUICE_ASSIGN_OR_RETURN(Job * job, EndAssignment(id, worker));
  if (job == nullptr) {
    // Cancelled: nothing follows.
  } else if (job->stage_index + 1 == job->spec.pipeline.size()) {
    Finish(*job, true, {});
  } else {
    ++job->stage_index;
    job->attempts = 0;
    job->checkpoint_step = 0;
    Enqueue(*job, false, now);
  }
  Dispatch(now);
  return Status::Ok();
}

Status Scheduler::StageFailed(JobId id, WorkerId worker, std::string_view reason, bool retryable,
                              TimePoint now) {
  SLUICE_ASSIGN_OR_RETURN(Job * job, EndAssignment(id, worker));
  if (job == nullptr) {
    // Cancelled: nothing follows.
  } else if (job->rerun_from.has_value()) {
    // Its input was lost: the producer runs again, this was not its fault.
    job->stage_index = *job->rerun_from;
    job->rerun_from.reset();
    job->attempts = 0;
    job->checkpoint_step = 0;
    Enqueue(*job, true, now);
  } else if (retryable && job->attempts < options_.max_attempts) {
    Enqueue(*job, true, now);
  } else {
    Finish(*job, false,
           std::string(StageName(job->stage())) + " failed after " + std::to_string(job->attempts) +
               " attempt(s): " + std::string(reason));
  }
  Dispatch(now);
  return Status::Ok();
}

Status Scheduler::WorkerLost(WorkerId id, TimePoint now) {
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return NotFoundError("WorkerLost: unknown worker " + std::to_string(id));
  }
  Worker& w = it->second;
  SetFree(w, 0);
  const std::set<JobId> assigned = w.assigned;
  workers_.erase(it);
  for (JobId jid : assigned) {
    Job& job = jobs_.at(jid);
    Stopped(job);
    if (job.cancelled) {
      Finish(job, false, "cancelled");
    } else if (job.attempts < options_.max_attempts) {
      Enqueue(job, true, now);  // Back to the head of its queue.
    } else {
      Finish(job, false,
             std::string(StageName(job.stage())) + " lost its worker " +
                 std::to_string(job.attempts) + " time(s)");
    }
  }
  Dispatch(now);
  return Status::Ok();
}

Status Scheduler::Cancel(JobId id, TimePoint now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.cancelled) {
    return NotFoundError("Cancel: no live job " + std::to_string(id));
  }
  Job& job = it->second;
  job.cancelled = true;
  if (job.decode_reserved) {
    job.decode_reserved = false;
    --decode_reserved_;
  }
  actions_.push_back(Action{Action::Kind::kReleaseJob, id, job.stage(), 0, {}});
  if (job.running) {
    // The worker stops at its next step boundary and reports; its slot
    // returns then.
    actions_.push_back(Action{Action::Kind::kStop, id, job.stage(), job.worker, {}});
  } else {
    Dequeue(job);
    jobs_.erase(it);
  }
  Dispatch(now);
  return Status::Ok();
}

Status Scheduler::Progress(JobId id, WorkerId worker, int step, bool checkpointed, TimePoint) {
  Job* job = nullptr;
  Worker* w = nullptr;
  SLUICE_RETURN_IF_ERROR(CheckRunning(id, worker, &job, &w));
  if (step < 0) {
    return InvalidArgumentError("Progress: negative step");
  }
  if (checkpointed) {
    job->checkpoint_step = std::max(job->checkpoint_step, step);
  }
  return Status::Ok();
}

Status Scheduler::Preempted(JobId id, WorkerId worker, TimePoint now) {
  SLUICE_ASSIGN_OR_RETURN(Job * job, EndAssignment(id, worker));
  if (job != nullptr) {
    --job->attempts;  // Yielding is not a failed attempt.
    Enqueue(*job, true, now);
  }
  Dispatch(now);
  return Status::Ok();
}

Status Scheduler::PayloadLost(JobId id, Stage producer, TimePoint now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.cancelled) {
    return NotFoundError("PayloadLost: no live job " + std::to_string(id));
  }
  Job& job = it->second;
  const auto& p = job.spec.pipeline;
  const auto pos = std::find(p.begin(), p.end(), producer);
  const auto index = static_cast<std::size_t>(pos - p.begin());
  if (pos == p.end() || index >= job.stage_index) {
    return InvalidArgumentError("PayloadLost: job " + std::to_string(id) + " has not run " +
                                std::string(StageName(producer)) + " yet");
  }
  if (job.running) {
    job.rerun_from = index;  // Applied when the consumer reports.
    return Status::Ok();
  }
  Dequeue(job);  // A decode reservation, if held, stays with the job.
  job.stage_index = index;
  job.attempts = 0;
  job.checkpoint_step = 0;
  Enqueue(job, true, now);
  Dispatch(now);
  return Status::Ok();
}

void Scheduler::Tick(TimePoint now) {
  Dispatch(now);
}

std::vector<Action> Scheduler::TakeActions() {
  return std::exchange(actions_, {});
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats s;
  for (int st = 0; st < kStageCount; ++st) {
    for (int c = 0; c < kClassCount; ++c) {
      s.queued[st] += queues_[st][c].size();
      s.queued_by_class[st][c] = queues_[st][c].size();
    }
    s.free_slots[st] = static_cast<std::size_t>(std::max(0, total_free_[st]));
  }
  for (const auto& [id, j] : jobs_) {
    s.running += j.running ? 1 : 0;
  }
  s.jobs = jobs_.size();
  s.decode_reserved = decode_reserved_;
  s.dispatches = dispatches_;
  s.preemptions = preemptions_;
  return s;
}

}  // namespace sluice::orchestrator
