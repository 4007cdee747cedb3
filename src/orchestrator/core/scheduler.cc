#include "orchestrator/core/scheduler.h"

#include <algorithm>

namespace sluice::orchestrator {

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

Status Scheduler::DeclareModel(const ModelSpec& model) {
  SLUICE_RETURN_IF_ERROR(ValidateModel(model));
  if (auto it = models_.find(model.name); it != models_.end()) {
    if (it->second.spec == model) {
      return Status::Ok();
    }
    return AlreadyExistsError("model '" + model.name + "' is declared as " +
                              FormatPipeline(it->second.spec.stages) + ", not " +
                              FormatPipeline(model.stages));
  }
  ModelEntry& entry = models_[model.name];
  entry.spec = model;
  for (std::size_t i = 0; i < model.stages.size(); ++i) {
    auto pool = std::make_unique<Pool>();
    pool->model = model.name;
    pool->stage = model.stages[i].name;
    pool->kind = model.stages[i].kind;
    pool->distance_to_end = model.stages.size() - 1 - i;
    const auto id = static_cast<PoolId>(pools_.size());
    if (by_distance_.size() <= pool->distance_to_end) {
      by_distance_.resize(pool->distance_to_end + 1);
    }
    by_distance_[pool->distance_to_end].push_back(id);
    pools_.push_back(std::move(pool));
    entry.pools.push_back(id);
    blocked_.push_back(false);
  }
  return Status::Ok();
}

const ModelSpec* Scheduler::FindModel(std::string_view name) const {
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : &it->second.spec;
}

std::vector<const ModelSpec*> Scheduler::Models() const {
  std::vector<const ModelSpec*> out;
  for (const auto& [name, entry] : models_) {
    out.push_back(&entry.spec);
  }
  return out;
}

std::vector<std::size_t> Scheduler::WorkersPerStage(std::string_view name) const {
  std::vector<std::size_t> out;
  if (auto it = models_.find(name); it != models_.end()) {
    for (PoolId p : it->second.pools) {
      out.push_back(pools_[p]->workers);
    }
  }
  return out;
}

Status Scheduler::ResolvePipeline(const JobSpec& spec, std::vector<PoolId>* pools) const {
  auto it = models_.find(spec.model);
  if (it == models_.end()) {
    return NotFoundError("Submit: model '" + spec.model + "' is not declared");
  }
  const ModelEntry& m = it->second;
  if (spec.pipeline.empty()) {
    *pools = m.pools;
    return Status::Ok();
  }
  std::size_t next = 0;  // Stages of the model not yet passed.
  for (const std::string& name : spec.pipeline) {
    std::size_t i = next;
    while (i < m.spec.stages.size() && m.spec.stages[i].name != name) {
      ++i;
    }
    if (i == m.spec.stages.size()) {
      return InvalidArgumentError(
          "Submit: stage '" + name + "' is not a stage of model '" + spec.model +
          "' after the ones before it (its pipeline: " + FormatPipeline(m.spec.stages) + ")");
    }
    pools->push_back(m.pools[i]);
    next = i + 1;
  }
  return Status::Ok();
}

Status Scheduler::Submit(const JobSpec& spec, TimePoint now) {
  if (spec.id == 0) {
    return InvalidArgumentError("Submit: job id 0 is reserved");
  }
  std::vector<PoolId> pools;
  SLUICE_RETURN_IF_ERROR(ResolvePipeline(spec, &pools));
  if (static_cast<int>(spec.priority) >= kClassCount) {
    return InvalidArgumentError("Submit: unknown priority class");
  }
  if (spec.start_stage >= pools.size()) {
    return InvalidArgumentError("Submit: start stage " + std::to_string(spec.start_stage) +
                                " is past the pipeline's " + std::to_string(pools.size()) +
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
  job.pools = std::move(pools);
  job.stage_index = spec.start_stage;
  job.checkpoint_step = spec.resume_step;
  Enqueue(job, false, now);
  Dispatch(now);
  return Status::Ok();
}

Status Scheduler::WorkerUp(WorkerId id, WorkerSpec spec, TimePoint now) {
  if (id == 0 || spec.capacity < 1) {
    return InvalidArgumentError("WorkerUp: worker id must be non-zero and capacity >= 1");
  }
  if (spec.models.empty()) {
    return InvalidArgumentError("WorkerUp: worker " + std::to_string(id) + " serves no model");
  }
  std::sort(spec.models.begin(), spec.models.end());
  spec.models.erase(std::unique(spec.models.begin(), spec.models.end()), spec.models.end());
  std::vector<PoolId> pools;
  for (const std::string& name : spec.models) {
    auto m = models_.find(name);
    if (m == models_.end()) {
      return NotFoundError("WorkerUp: model '" + name + "' is not declared");
    }
    const auto& stages = m->second.spec.stages;
    auto st = std::find_if(stages.begin(), stages.end(),
                           [&](const StageDecl& d) { return d.name == spec.stage; });
    if (st == stages.end()) {
      return NotFoundError("WorkerUp: model '" + name + "' has no stage '" + spec.stage +
                           "' (its pipeline: " + FormatPipeline(stages) + ")");
    }
    pools.push_back(m->second.pools[static_cast<std::size_t>(st - stages.begin())]);
  }
  auto [it, fresh] = workers_.try_emplace(id);
  Worker& w = it->second;
  if (!fresh && (w.stage != spec.stage || w.models != spec.models)) {
    return InvalidArgumentError("WorkerUp: worker " + std::to_string(id) + " serves " + w.stage +
                                " of its models, not " + spec.stage + " of others");
  }
  SetFree(w, 0);  // Re-indexed below under its (possibly new) labels.
  if (fresh) {
    w.seq = next_worker_seq_++;
    for (PoolId p : pools) {
      ++pools_[p]->workers;
      pools_[p]->slots += spec.capacity;
    }
  } else if (!w.draining) {
    for (PoolId p : pools) {
      pools_[p]->slots += spec.capacity - w.capacity;
    }
  }
  w.id = id;
  w.models = std::move(spec.models);
  w.stage = std::move(spec.stage);
  w.pools = std::move(pools);
  w.capacity = spec.capacity;
  w.labels = std::move(spec.labels);
  w.learned.clear();  // A rejoining process holds nothing it learned before.
  w.assignment_timeout = spec.assignment_timeout;
  SetFree(w, std::max(0, w.capacity - static_cast<int>(w.assigned.size())));
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
  for (PoolId p : it->second.pools) {
    --pools_[p]->workers;  // It takes no new work: readiness must not count it.
    pools_[p]->slots -= it->second.capacity;
  }
  SetFree(it->second, 0);
  Dispatch(now);  // Preemption may now be due: fewer admission slots.
  return Status::Ok();
}

Status Scheduler::LearnLabel(WorkerId worker, const std::string& label) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) {
    return NotFoundError("worker " + std::to_string(worker));
  }
  Worker& w = it->second;
  auto known = std::find(w.learned.begin(), w.learned.end(), label);
  if (known != w.learned.end()) {
    w.learned.erase(known);
    w.learned.push_back(label);
    return Status::Ok();
  }
  if (std::find(w.labels.begin(), w.labels.end(), label) != w.labels.end()) {
    return Status::Ok();  // A registered label: kept for good.
  }
  // The free sets are keyed by the worker's labels: out with the old ones,
  // in with the new.
  const int free = w.free;
  SetFree(w, 0);
  w.learned.push_back(label);
  w.labels.push_back(label);
  if (w.learned.size() > kMaxLearnedLabels) {
    auto old = std::find(w.labels.begin(), w.labels.end(), w.learned.front());
    if (old != w.labels.end()) {
      w.labels.erase(old);
    }
    w.learned.pop_front();
  }
  SetFree(w, free);
  return Status::Ok();
}

Status Scheduler::SetLearnedLabels(WorkerId worker, const std::vector<std::string>& held) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) {
    return NotFoundError("worker " + std::to_string(worker));
  }
  Worker& w = it->second;
  const int free = w.free;
  SetFree(w, 0);  // Out of the free sets under the old labels.
  for (const std::string& old : w.learned) {
    auto at = std::find(w.labels.begin(), w.labels.end(), old);
    if (at != w.labels.end()) {
      w.labels.erase(at);
    }
  }
  w.learned.clear();
  // `held` is newest first; learned keeps the oldest first.
  for (auto l = held.rbegin(); l != held.rend(); ++l) {
    const bool registered = std::find(w.labels.begin(), w.labels.end(), *l) != w.labels.end();
    const bool repeated = std::find(w.learned.begin(), w.learned.end(), *l) != w.learned.end();
    if (!registered && !repeated && !l->empty()) {
      w.learned.push_back(*l);
      w.labels.push_back(*l);
    }
  }
  while (w.learned.size() > kMaxLearnedLabels) {
    w.labels.erase(std::find(w.labels.begin(), w.labels.end(), w.learned.front()));
    w.learned.pop_front();
  }
  SetFree(w, free);
  return Status::Ok();
}

void Scheduler::SetFree(Worker& w, int free) {
  for (PoolId p : w.pools) {
    Pool& pool = *pools_[p];
    if (w.free > 0) {
      pool.free.erase({-w.free, w.seq, w.id});
      for (const std::string& l : w.labels) {
        pool.free_by_label[l].erase({-w.free, w.seq, w.id});
      }
    }
    pool.total_free += free - w.free;
    if (free > 0) {
      pool.free.insert({-free, w.seq, w.id});
      for (const std::string& l : w.labels) {
        pool.free_by_label[l].insert({-free, w.seq, w.id});
      }
    }
  }
  w.free = free;
}

void Scheduler::Enqueue(Job& job, bool at_head, TimePoint now) {
  Pool& pool = *pools_[job.pool()];
  const int cls = static_cast<int>(job.spec.priority);
  const std::int64_t deadline =
      job.spec.deadline.has_value() ? job.spec.deadline->time_since_epoch().count() : INT64_MAX;
  std::uint64_t fair = 0;
  if (!at_head) {
    FairClock& clock = pool.fair[cls];
    std::uint64_t& last = clock.last[job.spec.tenant];
    last = std::max(clock.now, last) + 1;
    fair = last;
  }
  job.key = QueueKey{deadline, fair, at_head ? next_head_seq_-- : next_seq_++, job.spec.id};
  job.queued_at = now;
  job.running = false;
  job.retry_at.reset();
  pool.queues[cls].insert(*job.key);
  // Its reservation and stage stay as they are while it is queued; only
  // Unreserve (which drops it here) and dispatch (after Dequeue) change it.
  if (job.reserved_in.has_value() && job.reserved_in == ReservationFor(job)) {
    pool.holders[cls].insert(*job.key);
  }
}

void Scheduler::Dequeue(Job& job) {
  if (job.key.has_value()) {
    Pool& pool = *pools_[job.pool()];
    const int cls = static_cast<int>(job.spec.priority);
    pool.queues[cls].erase(*job.key);
    pool.holders[cls].erase(*job.key);
    job.key.reset();
  }
}

Scheduler::Job* Scheduler::PickNext(const Pool& pool, TimePoint now) {
  Job* best = nullptr;
  QueuedView best_view;
  for (int c = 0; c < kClassCount; ++c) {
    const Queue& q = pool.queues[c];
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

Scheduler::Job* Scheduler::QueuedHolder(const Pool& pool) {
  for (int c = 0; c < kClassCount; ++c) {
    if (!pool.holders[c].empty()) {
      return &jobs_.at(pool.holders[c].begin()->job);
    }
  }
  return nullptr;
}

Scheduler::Worker* Scheduler::PickWorker(Pool& pool, const Job& job) {
  if (pool.free.empty()) {
    return nullptr;
  }
  auto view = [this](WorkerId id) {
    const Worker& w = workers_.at(id);
    return WorkerView{w.id, w.free, w.capacity, &w.labels};
  };
  std::optional<WorkerView> near;
  if (!job.spec.affinity.empty()) {
    auto it = pool.free_by_label.find(job.spec.affinity);
    if (it != pool.free_by_label.end() && !it->second.empty()) {
      near = view(std::get<2>(*it->second.begin()));
    }
  }
  // A retry skips the worker it failed on while another is free.
  auto first = pool.free.begin();
  if (std::get<2>(*first) == job.avoid && std::next(first) != pool.free.end()) {
    ++first;
  }
  if (near.has_value() && near->id == job.avoid && std::get<2>(*first) != job.avoid) {
    near.reset();
  }
  const Worker* compatible = BatchCompatible(pool, job, std::get<2>(*first));
  const WorkerView freest = view(compatible != nullptr ? compatible->id : std::get<2>(*first));
  const WorkerId chosen = policy_->ChooseWorker(View(job), near ? &*near : nullptr, freest);
  return &workers_.at(chosen == (near ? near->id : 0) ? near->id : freest.id);
}

const Scheduler::Worker* Scheduler::BatchCompatible(const Pool& pool, const Job& job,
                                                    WorkerId freest) const {
  if (job.spec.batch_key.empty()) {
    return nullptr;
  }
  const Worker& f = workers_.at(freest);
  if (f.free == f.capacity) {
    return nullptr;  // Idle: a batch of one.
  }
  auto runs_key = [&](const Worker& w) {
    return std::any_of(w.assigned.begin(), w.assigned.end(), [&](JobId id) {
      auto it = jobs_.find(id);
      return it != jobs_.end() && it->second.pool() == job.pool() &&
             it->second.spec.batch_key == job.spec.batch_key;
    });
  };
  if (runs_key(f)) {
    return nullptr;  // The freest already is.
  }
  for (const auto& entry : pool.free) {
    const Worker& w = workers_.at(std::get<2>(entry));
    if (w.id != job.avoid && runs_key(w)) {
      return &w;
    }
  }
  return nullptr;
}

std::optional<PoolId> Scheduler::ReservationFor(const Job& job) const {
  if (pools_[job.pool()]->kind != StageKind::kAdmission ||
      job.stage_index + 1 >= job.pools.size()) {
    return std::nullopt;
  }
  return job.pools[job.stage_index + 1];
}

void Scheduler::Unreserve(Job& job) {
  if (job.reserved_in.has_value()) {
    if (job.key.has_value()) {  // Queued: no longer a holder.
      pools_[job.pool()]->holders[static_cast<int>(job.spec.priority)].erase(*job.key);
    }
    --pools_[*job.reserved_in]->reserved;
    --reserved_;
    job.reserved_in.reset();
  }
}

void Scheduler::Lease(Job& job, TimePoint now) {
  std::chrono::milliseconds timeout = options_.assignment_timeout;
  if (auto w = workers_.find(job.worker);
      w != workers_.end() && w->second.assignment_timeout.count() > 0) {
    timeout = w->second.assignment_timeout;  // Its model's profile knows its stage's pace.
  }
  if (timeout.count() <= 0) {
    return;
  }
  Unlease(job);
  job.lease_until = now + timeout;
  leases_.insert({*job.lease_until, job.spec.id});
}

void Scheduler::Unlease(Job& job) {
  if (job.lease_until.has_value()) {
    leases_.erase({*job.lease_until, job.spec.id});
    job.lease_until.reset();
  }
}

void Scheduler::ExpireLeases(TimePoint now) {
  while (!leases_.empty() && leases_.begin()->first <= now) {
    Job& job = jobs_.at(leases_.begin()->second);
    Worker& w = workers_.at(job.worker);  // A lost worker's jobs were stopped first.
    const WorkerId was = job.worker;
    // The worker may still be running it: its slot comes back only with
    // its own reports (Credits), and its late report is stale.
    actions_.push_back(
        Action{Action::Kind::kStop, job.spec.id, StageOf(job), was, "lease expired"});
    Stopped(job, w.pools);  // Ends the lease too.
    w.assigned.erase(job.spec.id);
    if (job.cancelled) {
      Finish(job, false, "cancelled");
    } else if (job.attempts < options_.max_attempts) {
      job.avoid = was;
      Enqueue(job, true, now);
    } else {
      Finish(job, false,
             StageOf(job) + " made no progress within its lease " + std::to_string(job.attempts) +
                 " time(s)");
    }
  }
}

bool Scheduler::DispatchOne(PoolId pool_id, Job& job, TimePoint now) {
  Pool& pool = *pools_[pool_id];
  const std::optional<PoolId> reserve = ReservationFor(job);
  if (reserve.has_value() && job.reserved_in != reserve) {
    const Pool& next = *pools_[*reserve];
    if (options_.admission_overcommit > 0
            ? static_cast<double>(next.reserved) >= options_.admission_overcommit * next.slots
            : next.total_free <= static_cast<int>(next.reserved)) {
      return false;  // No downstream room for its output: hold admission back.
    }
  }
  Worker* w = PickWorker(pool, job);
  {
    FairClock& clock = pool.fair[static_cast<int>(job.spec.priority)];
    clock.now = std::max(clock.now, job.key->fair);
    if (auto t = clock.last.find(job.spec.tenant);
        t != clock.last.end() && t->second <= clock.now) {
      clock.last.erase(t);  // Caught up: max(now, last) is `now` anyway.
    }
  }
  Dequeue(job);
  job.running = true;
  job.worker = w->id;
  ++job.attempts;
  if (pool.kind == StageKind::kAdmission && job.spec.priority == PriorityClass::kBatch) {
    for (PoolId p : w->pools) {
      pools_[p]->running_batch.insert(job.spec.id);
    }
  }
  w->assigned.insert(job.spec.id);
  SetFree(*w, w->free - 1);
  if (job.reserved_in.has_value() && *job.reserved_in == pool_id) {
    Unreserve(job);  // The reservation is used now.
  }
  if (reserve.has_value() && job.reserved_in != reserve) {
    Unreserve(job);
    job.reserved_in = reserve;
    ++pools_[*reserve]->reserved;
    ++reserved_;
  }
  Lease(job, now);
  ++dispatches_;
  actions_.push_back(
      Action{Action::Kind::kDispatch, job.spec.id, pool.stage, w->id, {}, job.checkpoint_step});
  return true;
}

bool Scheduler::DispatchBest(const std::vector<PoolId>& pools, std::vector<bool>& blocked,
                             TimePoint now) {
  Job* best = nullptr;
  PoolId best_pool = 0;
  QueuedView best_view;
  for (PoolId p : pools) {
    if (blocked[p] || pools_[p]->total_free <= 0) {
      continue;
    }
    Job* job = PickNext(*pools_[p], now);
    if (job == nullptr) {
      blocked[p] = true;
      continue;
    }
    QueuedView view = View(*job);
    if (best == nullptr || policy_->RunsBefore(view, best_view, now)) {
      best = job;
      best_pool = p;
      best_view = view;
    }
  }
  if (best == nullptr) {
    return false;
  }
  if (!DispatchOne(best_pool, *best, now)) {
    // Its head waits for a downstream slot. A queued job that holds its
    // slot already needs no new room: it goes instead, or the slots held by
    // jobs queued behind the head would wait for the head forever (the
    // head waits for them: nothing runs).
    Job* holder = reserved_ > 0 ? QueuedHolder(*pools_[best_pool]) : nullptr;
    if (holder == nullptr || !DispatchOne(best_pool, *holder, now)) {
      blocked[best_pool] = true;
    }
  }
  return true;
}

void Scheduler::Dispatch(TimePoint now) {
  // Nearest the pipeline's end first: finishing work frees the pipeline.
  std::fill(blocked_.begin(), blocked_.end(), false);
  for (const std::vector<PoolId>& group : by_distance_) {
    while (DispatchBest(group, blocked_, now)) {
    }
  }
  for (PoolId p = 0; p < pools_.size(); ++p) {
    if (pools_[p]->kind == StageKind::kAdmission) {
      Preempt(p);
    }
  }
}

// Interactive jobs waiting at an admission pool while batch jobs hold every
// slot of its workers: ask one batch job per waiting interactive job to
// checkpoint and yield.
void Scheduler::Preempt(PoolId pool_id) {
  Pool& pool = *pools_[pool_id];
  const Queue& waiting = pool.queues[static_cast<int>(PriorityClass::kInteractive)];
  if (waiting.empty() || pool.total_free > 0 || pool.preempting >= waiting.size()) {
    return;
  }
  for (JobId id : pool.running_batch) {
    if (pool.preempting >= waiting.size()) {
      break;
    }
    Job& job = jobs_.at(id);
    if (!job.cancelled && !job.preempted_for.has_value()) {
      job.preempted_for = pool_id;
      ++pool.preempting;
      ++preemptions_;
      actions_.push_back(Action{Action::Kind::kCheckpoint, id, StageOf(job), job.worker, {}});
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

void Scheduler::Stopped(Job& job, const std::vector<PoolId>& worker_pools) {
  if (job.preempted_for.has_value()) {
    --pools_[*job.preempted_for]->preempting;
    job.preempted_for.reset();
  }
  for (PoolId p : worker_pools) {
    pools_[p]->running_batch.erase(job.spec.id);
  }
  Unlease(job);
  job.running = false;
  job.worker = 0;
}

void Scheduler::Release(Job& job, Worker& w) {
  Stopped(job, w.pools);
  w.assigned.erase(job.spec.id);
  SetFree(w,
          w.draining ? 0 : std::min(w.free + 1, w.capacity - static_cast<int>(w.assigned.size())));
}

void Scheduler::Finish(Job& job, bool ok, std::string reason) {
  Unreserve(job);
  const JobId id = job.spec.id;
  if (!job.cancelled) {
    actions_.push_back(Action{ok ? Action::Kind::kJobDone : Action::Kind::kJobFailed, id,
                              StageOf(job), 0, std::move(reason)});
    if (!ok) {
      actions_.push_back(Action{Action::Kind::kReleaseJob, id, StageOf(job), 0, {}});
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
  } else if (job->stage_index + 1 == job->pools.size()) {
    Finish(*job, true, {});
  } else {
    ++job->stage_index;
    job->attempts = 0;
    job->avoid = 0;
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
    job->avoid = worker;
    if (options_.retry_backoff.count() > 0) {
      // attempts >= 1 here: the n-th retry waits backoff * 2^(n-1).
      auto wait = options_.retry_backoff;
      for (int i = 1; i < job->attempts && wait < kMaxRetryBackoff; ++i) {
        wait *= 2;
      }
      job->retry_at = now + std::min(wait, kMaxRetryBackoff);
      retries_.emplace(*job->retry_at, id);
    } else {
      Enqueue(*job, true, now);
    }
  } else {
    Finish(*job, false,
           StageOf(*job) + " failed after " + std::to_string(job->attempts) +
               " attempt(s): " + std::string(reason));
  }
  Dispatch(now);
  return Status::Ok();
}

std::vector<JobId> Scheduler::AssignedTo(WorkerId id) const {
  auto it = workers_.find(id);
  return it == workers_.end()
             ? std::vector<JobId>{}
             : std::vector<JobId>(it->second.assigned.begin(), it->second.assigned.end());
}

Status Scheduler::WorkerLost(WorkerId id, TimePoint now) {
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return NotFoundError("WorkerLost: unknown worker " + std::to_string(id));
  }
  Worker& w = it->second;
  SetFree(w, 0);
  const std::set<JobId> assigned = w.assigned;
  const std::vector<PoolId> pools = w.pools;
  for (PoolId p : pools) {
    pools_[p]->workers -= w.draining ? 0 : 1;  // A draining one was uncounted already.
    pools_[p]->slots -= w.draining ? 0 : w.capacity;
  }
  workers_.erase(it);
  for (JobId jid : assigned) {
    Job& job = jobs_.at(jid);
    Stopped(job, pools);
    if (job.cancelled) {
      Finish(job, false, "cancelled");
    } else if (job.attempts < options_.max_attempts) {
      Enqueue(job, true, now);  // Back to the head of its queue.
    } else {
      Finish(job, false,
             StageOf(job) + " lost its worker " + std::to_string(job.attempts) + " time(s)");
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
  Unreserve(job);
  actions_.push_back(Action{Action::Kind::kReleaseJob, id, StageOf(job), 0, {}});
  if (job.running) {
    // The worker stops at its next step boundary and reports; its slot
    // returns then.
    actions_.push_back(Action{Action::Kind::kStop, id, StageOf(job), job.worker, {}});
  } else {
    Dequeue(job);
    jobs_.erase(it);
  }
  Dispatch(now);
  return Status::Ok();
}

Status Scheduler::Progress(JobId id, WorkerId worker, int step, bool checkpointed, TimePoint now) {
  Job* job = nullptr;
  Worker* w = nullptr;
  SLUICE_RETURN_IF_ERROR(CheckRunning(id, worker, &job, &w));
  if (step < 0) {
    return InvalidArgumentError("Progress: negative step");
  }
  if (checkpointed) {
    job->checkpoint_step = std::max(job->checkpoint_step, step);
  }
  Lease(*job, now);
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

Status Scheduler::PayloadLost(JobId id, std::string_view producer, TimePoint now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.cancelled) {
    return NotFoundError("PayloadLost: no live job " + std::to_string(id));
  }
  Job& job = it->second;
  std::size_t index = 0;
  while (index < job.stage_index && pools_[job.pools[index]]->stage != producer) {
    ++index;
  }
  if (index >= job.stage_index) {
    return InvalidArgumentError("PayloadLost: job " + std::to_string(id) + " has not run " +
                                std::string(producer) + " yet");
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

void Scheduler::QueueDueRetries(TimePoint now) {
  while (!retries_.empty() && retries_.begin()->first <= now) {
    auto [at, id] = *retries_.begin();
    retries_.erase(retries_.begin());
    auto it = jobs_.find(id);
    if (it != jobs_.end() && it->second.retry_at == at && !it->second.cancelled) {
      Enqueue(it->second, true, now);
    }
  }
}

void Scheduler::Tick(TimePoint now) {
  QueueDueRetries(now);
  ExpireLeases(now);
  Dispatch(now);
}

std::vector<Action> Scheduler::TakeActions() {
  return std::exchange(actions_, {});
}

std::vector<PoolStats> Scheduler::PoolsNow() const {
  std::vector<PoolStats> out;
  for (const auto& [name, model] : models_) {
    for (PoolId id : model.pools) {
      const Pool& p = *pools_[id];
      PoolStats ps;
      ps.model = p.model;
      ps.stage = p.stage;
      ps.kind = p.kind;
      for (int c = 0; c < kClassCount; ++c) {
        ps.queued += p.queues[c].size();
        ps.queued_by_class[c] = p.queues[c].size();
      }
      ps.free_slots = static_cast<std::size_t>(std::max(0, p.total_free));
      ps.workers = p.workers;
      ps.slots = static_cast<std::size_t>(std::max(0, p.slots));
      ps.reserved = p.reserved;
      out.push_back(std::move(ps));
    }
  }
  return out;
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats s;
  s.pools = PoolsNow();
  for (const auto& [id, j] : jobs_) {
    s.running += j.running ? 1 : 0;
  }
  s.jobs = jobs_.size();
  s.reserved = reserved_;
  s.dispatches = dispatches_;
  s.preemptions = preemptions_;
  return s;
}

}  // namespace sluice::orchestrator
