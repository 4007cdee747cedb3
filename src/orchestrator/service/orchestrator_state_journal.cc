// OrchestratorState across restarts: taking jobs back from the journal,
// saving their progress, keeping finished jobs' results (the result dir)
// and letting them expire.
#include <utility>

#include "common/log.h"
#include "orchestrator/service/journal_outbox.h"
#include "orchestrator/service/orchestrator_state.h"

namespace sluice::orchestrator {

Status OrchestratorState::Restore(const PayloadsExist& exist) {
  const JournalFlush flush(this);  // After the lock is released.
  if (journal_ == nullptr) {
    return Status::Ok();
  }
  MutexLock lock(mu_);
  SLUICE_ASSIGN_OR_RETURN(JobId max, journal_->MaxId());
  next_job_ = std::max(next_job_, max + 1);
  SLUICE_ASSIGN_OR_RETURN(std::vector<JournaledJob> jobs, journal_->Unfinished());
  const TimePoint now = Now();
  std::size_t resumed = 0;
  for (const JournaledJob& job : jobs) {
    const JobProgress& p = job.progress;
    if (!job.model_stages.empty() && scheduler_.FindModel(job.request.model) == nullptr) {
      if (Status s = scheduler_.DeclareModel({job.request.model, job.model_stages}); s.ok()) {
        model_declared_unix_s_.try_emplace(job.request.model, UnixNow());
      }
    }
    // A finished stage's output counts only while the store still holds it
    // (an output without store keys cannot be checked); a checkpoint with
    // no stage finished belongs to the first stage, and its worker starts
    // over if the checkpoint is gone.
    const bool usable = p.done.has_value() ? !p.keys.empty() && exist != nullptr && exist(p.keys)
                                           : p.checkpoint_step > 0;
    if (p.done.has_value() && !usable) {
      // The job runs from its first stage: whatever of the saved output is
      // still in the store is nobody's now (it stayed for good before).
      payloads_.ReleaseKeys(p.keys);
    }
    Result<JobId> ok =
        SubmitLocked(job.id, job.request, now, /*journal=*/false, usable ? &p : nullptr);
    if (!ok.ok()) {
      SLUICE_LOG(error, "journal: job {} cannot be resubmitted: {}", job.id,
                 ok.status().ToString());
      JobOutcome failed;
      failed.status = JobStatus::kFailed;
      failed.error = "cannot be resubmitted after a restart: " + std::string(ok.status().message());
      failed.error_type = "server_error";
      failed.finished_unix_s = UnixNow();
      (void)journal_->Finish(job.id, failed);
      continue;
    }
    ++stats_.restored;
    resumed += usable ? 1 : 0;
  }
  if (!jobs.empty()) {
    SLUICE_LOG(info, "journal: {} unfinished job(s) resubmitted, {} past their first stage or step",
               stats_.restored, resumed);
  }
  SLUICE_RETURN_IF_ERROR(RestoreFinishedLocked());
  RestoreKeptLocked(now);
  return Status::Ok();
}

void OrchestratorState::RestoreKeptLocked(TimePoint now) {
  const std::int64_t now_ms = UnixNowMs();
  Result<std::vector<KeptCheckpoint>> kept = journal_->Kept();
  if (!kept.ok()) {
    // Edit and resume of earlier jobs is lost; everything else serves on.
    SLUICE_LOG(error, "{}", kept.status().ToString());
    return;
  }
  for (const KeptCheckpoint& k : *kept) {
    if (jobs_.count(k.job) != 0) {
      checkpoints_.Keep(
          k.job, k.step,
          now - std::chrono::milliseconds(std::max<std::int64_t>(0, now_ms - k.unix_ms)));
    }
  }
  if (!kept->empty()) {
    SLUICE_LOG(info, "journal: {} kept checkpoint step(s) resumable again", kept->size());
  }
}

void OrchestratorState::KeepLocked(JobRecord& j, int step, TimePoint now) {
  if (!checkpoints_.Keep(j.view.id, step, now) || journal_ == nullptr) {
    return;
  }
  outbox_->Keep({j.view.id, step, UnixNowMs()});
}

Status OrchestratorState::RestoreFinishedLocked() {
  SLUICE_ASSIGN_OR_RETURN(
      std::vector<FinishedRecord> done,
      journal_->Finished(options_.max_finished_jobs, UnixNow() - options_.result_ttl.count()));
  for (FinishedRecord& f : done) {
    if (jobs_.count(f.id) != 0 || f.request.name.empty() || names_.count(f.request.name) != 0) {
      continue;
    }
    JobRecord rec;
    rec.view.id = f.id;
    rec.view.name = f.request.name;
    rec.view.tenant = f.request.tenant;
    rec.view.kind = f.request.kind;
    rec.view.model = f.request.model;
    rec.view.status = f.status;
    rec.view.error = std::move(f.error);
    if (!f.error_type.empty()) {
      rec.view.error_type = std::move(f.error_type);
    }
    rec.view.result_type = std::move(f.result_type);
    if (results_ != nullptr && rec.view.status == JobStatus::kSucceeded) {
      // A journal of an earlier version kept the bytes: they move to the
      // dir (the row keeps them too until the job is pruned).
      if (!f.result.empty()) {
        if (Status s = results_->Write(f.id, f.result); !s.ok()) {
          SLUICE_LOG(error, "{}", s.ToString());
          rec.view.result = std::move(f.result);
        }
      }
      rec.view.result_stored = rec.view.result.empty();
    } else {
      rec.view.result = std::move(f.result);
    }
    if (f.result_dropped && rec.view.result.empty()) {
      rec.view.result_stored = true;  // Not in the dir either: read as gone.
    }
    rec.view.request_json = f.request.request_json;
    rec.view.created_unix_s = f.created_unix_s;
    rec.view.finished_unix_s = f.finished_unix_s;
    rec.request = std::move(f.request);
    names_[rec.view.name] = f.id;
    finished_order_.push_back(f.id);
    jobs_.emplace(f.id, std::move(rec));
  }
  if (!done.empty()) {
    SLUICE_LOG(info, "journal: {} finished job(s) queryable again", done.size());
  }
  RemoveUnownedResultsLocked();
  return Status::Ok();
}

void OrchestratorState::RemoveUnownedResultsLocked() {
  if (results_ == nullptr) {
    return;
  }
  std::size_t removed = 0;
  for (JobId id : results_->List()) {
    auto j = jobs_.find(id);
    if (j == jobs_.end() || !j->second.view.result_stored) {
      // Expired or pruned while the orchestrator was down, or written by a
      // job that had not finished when it stopped (it runs again).
      results_->Remove(id);
      ++removed;
    }
  }
  if (removed > 0) {
    SLUICE_LOG(info, "result dir {}: {} result(s) no job answers for removed", results_->path(),
               removed);
  }
}

void OrchestratorState::SaveProgressLocked(JobRecord& j) {
  if (journal_ == nullptr) {
    return;
  }
  outbox_->SaveProgress(j.view.id, j.saved);
}

void OrchestratorState::StoreResultLocked(JobRecord& rec, std::string_view bytes) {
  if (results_ != nullptr) {
    if (Status s = results_->Write(rec.view.id, bytes); s.ok()) {
      rec.view.result.clear();
      rec.view.result_stored = true;
      return;
    } else {
      // Kept in memory (and the journal) instead: served all the same.
      SLUICE_LOG(error, "job {}: {}", rec.view.name, s.ToString());
    }
  }
  rec.view.result = bytes;
  rec.view.result_stored = false;
}

Result<std::string> OrchestratorState::ResultBytes(const JobView& v) const {
  if (!v.result_stored) {
    return v.result;
  }
  if (results_ == nullptr) {
    // Restored from a journal that did not keep it (too large for etcd).
    return NotFoundError("job " + v.name +
                         ": its result was larger than the journal keeps and went with the "
                         "orchestrator that made it");
  }
  return results_->Read(v.id);
}

void OrchestratorState::ExpireFinishedLocked(TimePoint now) {
  // Oldest finished first: stop at the first one still within its ttl.
  const std::int64_t oldest_kept = UnixNow() - options_.result_ttl.count();
  while (!finished_order_.empty()) {
    auto j = jobs_.find(finished_order_.front());
    if (j != jobs_.end() && j->second.view.finished_unix_s >= oldest_kept) {
      break;
    }
    EraseLocked(finished_order_.front());
    finished_order_.pop_front();
  }
  if (journal_ != nullptr && now >= next_prune_) {
    next_prune_ = now + std::chrono::seconds(10);
    if (Status s = journal_->Prune(options_.max_finished_jobs, oldest_kept,
                                   UnixNowMs() - options_.checkpoint_retention.count() * 1000);
        !s.ok()) {
      SLUICE_LOG(error, "{}", s.ToString());
    }
  }
}

}  // namespace sluice::orchestrator
