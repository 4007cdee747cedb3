// Submissions: checks, the journal (under the lock, or outside it for a
// concurrent journal) and the job's entry into the scheduler.
#include <algorithm>
#include <utility>

#include "common/log.h"
#include "common/mutex.h"
#include "common/random.h"
#include "orchestrator/service/orchestrator_state.h"

namespace sluice::orchestrator {
namespace {

std::string Names(const std::vector<const ModelSpec*>& models) {
  std::string out;
  for (const ModelSpec* m : models) {
    out += (out.empty() ? "" : ", ") + m->name;
  }
  return out.empty() ? "none" : out;
}

}  // namespace

Result<JobId> OrchestratorState::Submit(const JobRequest& request) {
  const JournalFlush flush(this);  // After the lock is released.
  const TimePoint now = Now();
  JobRequest r = request;
  if (options_.pipeline.has_value()) {
    r.pipeline = *options_.pipeline;
  }
  if (r.name.empty()) {
    r.name = "job-" + internal::RandomId();
  }
  r.request_json = WithCacheScope(r.request_json, r.tenant);
  const std::optional<CachedStart> cached = CachedStartFor(r);
  if (journal_ != nullptr && journal_->concurrent()) {
    return SubmitJournaledOutside(std::move(r), now, cached);
  }
  MutexLock lock(mu_);
  SLUICE_RETURN_IF_ERROR(ResolveCheckpointsLocked(r, now));
  SLUICE_RETURN_IF_ERROR(AdmitTenantLocked(r.tenant));
  Result<JobId> id = SubmitLocked(next_job_, r, now, /*journal=*/true, /*from=*/nullptr,
                                  cached.has_value() ? &*cached : nullptr);
  if (id.ok()) {
    ++next_job_;
  }
  return id;
}

Result<JobId> OrchestratorState::SubmitJournaledOutside(JobRequest r, TimePoint now,
                                                        const std::optional<CachedStart>& cached) {
  JobId id = 0;
  JobRequest resolved;
  std::vector<StageDecl> stages;
  {
    MutexLock lock(mu_);
    SLUICE_RETURN_IF_ERROR(ResolveCheckpointsLocked(r, now));
    SLUICE_RETURN_IF_ERROR(AdmitTenantLocked(r.tenant));
    if (names_.count(r.name) != 0) {
      return AlreadyExistsError("job name " + r.name + " in use");
    }
    // A full queue refuses before the journal is written (counting the
    // submissions being journaled now).
    const std::size_t in_system = scheduler_.JobCount() + journaling_;
    if (in_system >= options_.scheduler.max_queued_jobs) {
      ++stats_.rejected;
      return ResourceExhaustedError("Submit: " + std::to_string(in_system) +
                                    " jobs in the system; retry later");
    }
    SLUICE_ASSIGN_OR_RETURN(resolved, ResolveModelLocked(r, &stages));
    id = next_job_++;
    ++journaling_;
  }
  // Durable before it is acknowledged.
  const Status added = journal_->Add(id, resolved, stages);
  MutexLock lock(mu_);
  --journaling_;
  SLUICE_RETURN_IF_ERROR(added);
  Status admitted = AdmitTenantLocked(r.tenant);
  Result<JobId> got = admitted.ok() ? SubmitLocked(id, r, now, /*journal=*/false, nullptr,
                                                   cached.has_value() ? &*cached : nullptr)
                                    : Result<JobId>(admitted);
  if (!got.ok()) {
    if (Status s = journal_->Drop(id); !s.ok()) {
      SLUICE_LOG(error, "{}", s.ToString());
    }
  }
  return got;
}

Status OrchestratorState::AdmitTenantLocked(const std::string& tenant) {
  auto t = options_.tenants.find(tenant);
  if (t == options_.tenants.end()) {
    return Status::Ok();
  }
  const TenantLimits& l = t->second;
  const auto u = unfinished_.find(tenant);
  const std::size_t open = u == unfinished_.end() ? 0 : u->second;
  const auto share = static_cast<std::size_t>(
      l.queue_share * static_cast<double>(options_.scheduler.max_queued_jobs));
  if (l.max_jobs_in_flight > 0 && open >= l.max_jobs_in_flight) {
    ++stats_.rejected;
    return ResourceExhaustedError("tenant '" + tenant + "' has " + std::to_string(open) +
                                  " jobs in flight, its limit");
  }
  if (l.queue_share > 0 && open >= std::max<std::size_t>(1, share)) {
    ++stats_.rejected;
    return ResourceExhaustedError("tenant '" + tenant + "' holds " + std::to_string(open) +
                                  " unfinished jobs, its share of the queue");
  }
  return Status::Ok();
}

Result<JobRequest> OrchestratorState::ResolveModelLocked(const JobRequest& r,
                                                         std::vector<StageDecl>* stages) {
  JobRequest resolved = r;
  if (resolved.model.empty()) {
    resolved.model = options_.default_model;
  }
  const ModelSpec* model = scheduler_.FindModel(resolved.model);
  if (model == nullptr) {
    return NotFoundError("model '" + resolved.model +
                         "' is not served here (models: " + Names(scheduler_.Models()) + ")");
  }
  *stages = model->stages;
  if (resolved.pipeline.empty()) {
    for (const StageDecl& d : model->stages) {
      resolved.pipeline.push_back(d.name);
    }
  }
  return resolved;
}

Result<JobId> OrchestratorState::SubmitLocked(JobId id, const JobRequest& r, TimePoint now,
                                              bool journal, const JobProgress* from,
                                              const CachedStart* cached) {
  // Journals written before jobs had names: the name clients were given.
  const std::string name = r.name.empty() ? "job-" + std::to_string(id) : r.name;
  if (names_.count(name) != 0) {
    return AlreadyExistsError("job name " + name + " in use");
  }
  std::vector<StageDecl> model_stages;
  SLUICE_ASSIGN_OR_RETURN(const JobRequest req, ResolveModelLocked(r, &model_stages));
  JobSpec spec;
  spec.id = id;
  spec.model = req.model;
  spec.pipeline = req.pipeline;
  spec.priority = r.priority;
  if (r.deadline.has_value()) {
    spec.deadline = now + *r.deadline;
  }
  spec.affinity = r.affinity;
  spec.batch_key = r.batch_key;
  spec.tenant = r.tenant;
  if (from != nullptr && from->done.has_value()) {
    const auto at = std::find(req.pipeline.begin(), req.pipeline.end(), *from->done);
    if (at == req.pipeline.end() || at + 1 == req.pipeline.end()) {
      from = nullptr;  // Not a stage this job runs before another: start over.
    } else {
      spec.start_stage = static_cast<std::size_t>(at - req.pipeline.begin()) + 1;
    }
  }
  if (from != nullptr) {
    spec.resume_step = from->checkpoint_step;
  }
  if (cached != nullptr && (req.pipeline.size() < 2 || req.pipeline.front() != cached->stage)) {
    cached = nullptr;  // The model changed under it: run every stage.
  }
  if (cached != nullptr) {
    spec.start_stage = 1;
  }
  if (Status s = scheduler_.Submit(spec, now); !s.ok()) {
    stats_.rejected += s.code() == StatusCode::kResourceExhausted ? 1 : 0;
    return s;
  }
  if (journal && journal_ != nullptr) {
    // Durable before it is acknowledged; undone when it cannot be.
    if (Status s = journal_->Add(id, req, model_stages); !s.ok()) {
      (void)scheduler_.Cancel(id, now);
      (void)scheduler_.TakeActions();
      return s;
    }
  }
  ++stats_.submitted;
  JobRecord& j = jobs_[id];
  j.request = req;
  j.submitted = now;
  j.queued_since = now;
  j.view.id = id;
  j.view.name = name;
  j.view.tenant = r.tenant;
  names_[j.view.name] = id;
  ++unfinished_[r.tenant];
  j.view.kind = r.kind;
  j.view.model = req.model;
  j.view.request_json = r.request_json;
  j.view.status = JobStatus::kQueued;
  j.view.stage = req.pipeline[spec.start_stage];
  j.view.created_unix_s = UnixNow();
  std::string restored;
  if (from != nullptr) {
    j.saved = *from;
    if (from->done.has_value()) {
      j.outputs[*from->done] = from->output;
      payloads_.Record(id, *from->done, from->keys);
      restored = "restored after " + *from->done;
    } else {
      restored = "restored";
    }
    if (from->checkpoint_step > 0) {
      restored += " at step " + std::to_string(from->checkpoint_step);
    }
  }
  if (cached != nullptr) {
    j.outputs[cached->stage] = cached->input;  // No payload keys: cache entries stay.
    ++stats_.cache_skips;
    EventLocked(j, now, "cache_hit", cached->stage + " skipped: every condition is cached");
  }
  EventLocked(j, now, "queued", restored);
  ApplyLocked(now);
  return id;
}

}  // namespace sluice::orchestrator
