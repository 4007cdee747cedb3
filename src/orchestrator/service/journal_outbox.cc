#include "orchestrator/service/journal_outbox.h"

#include <algorithm>

#include "common/log.h"

namespace sluice::orchestrator {

void JournalOutbox::SaveProgress(JobId job, const JobProgress& p) {
  MutexLock lock(mu_);
  for (Write& w : queue_) {
    if (w.kind == Write::Kind::kProgress && w.job == job) {
      w.progress = p;  // Replaced where it stands: it was never read.
      return;
    }
  }
  Write w;
  w.kind = Write::Kind::kProgress;
  w.job = job;
  w.progress = p;
  queue_.push_back(std::move(w));
}

void JournalOutbox::Finish(JobId job, const JobOutcome& o) {
  Write w;
  w.kind = Write::Kind::kFinish;
  w.job = job;
  w.outcome = o;
  w.outcome.result = {};
  w.result.assign(o.result);
  MutexLock lock(mu_);
  std::erase_if(queue_,
                [job](const Write& q) { return q.kind == Write::Kind::kProgress && q.job == job; });
  queue_.push_back(std::move(w));
}

void JournalOutbox::Keep(const KeptCheckpoint& k) {
  Write w;
  w.kind = Write::Kind::kKeep;
  w.job = k.job;
  w.kept = k;
  MutexLock lock(mu_);
  queue_.push_back(std::move(w));
}

bool JournalOutbox::pending() const {
  MutexLock lock(mu_);
  return !queue_.empty();
}

std::vector<JournalOutbox::Write> JournalOutbox::Take() {
  std::vector<Write> out;
  MutexLock lock(mu_);
  out.swap(queue_);
  return out;
}

int JournalOutbox::Apply(std::vector<Write>& batch, JobJournal& journal) {
  int failed = 0;
  for (Write& w : batch) {
    Status s;
    switch (w.kind) {
      case Write::Kind::kProgress:
        s = journal.SaveProgress(w.job, w.progress);
        break;
      case Write::Kind::kFinish:
        w.outcome.result = w.result;
        s = journal.Finish(w.job, w.outcome);
        break;
      case Write::Kind::kKeep:
        s = journal.Keep(w.kept);
        break;
    }
    if (!s.ok()) {
      ++failed;
      SLUICE_LOG(error, "{}", s.ToString());
    }
  }
  return failed;
}

}  // namespace sluice::orchestrator
