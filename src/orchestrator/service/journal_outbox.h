// Journal writes the orchestrator's state decides under its lock and that
// are written after it: a job's saved progress, its outcome (with its
// result bytes) and its kept checkpoints. The state queues them; whoever
// releases the state's lock writes the queue in order (Take, then Apply),
// so no journal write — a large result's, say — holds up every other call.
// A job's later progress replaces one still queued, and its outcome drops
// it (the journal drops a finished job's progress anyway).
// Thread-safe.
#ifndef SLUICE_ORCHESTRATOR_SERVICE_JOURNAL_OUTBOX_H_
#define SLUICE_ORCHESTRATOR_SERVICE_JOURNAL_OUTBOX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "orchestrator/service/orchestrator_state.h"

namespace sluice::orchestrator {

class JournalOutbox {
 public:
  struct Write {
    enum class Kind : std::uint8_t { kProgress, kFinish, kKeep };
    Kind kind = Kind::kProgress;
    JobId job = 0;
    JobProgress progress;  // kProgress.
    JobOutcome outcome;    // kFinish; its result is `result` (set by Apply).
    std::string result;    // kFinish: the result bytes, copied.
    KeptCheckpoint kept;   // kKeep.
  };

  // Queue a write. `p` and `o.result` are copied.
  void SaveProgress(JobId job, const JobProgress& p);
  void Finish(JobId job, const JobOutcome& o);
  void Keep(const KeptCheckpoint& k);

  // Whether writes are queued (a hint: another thread may take them).
  bool pending() const;
  // The queued writes, oldest first, leaving none queued.
  std::vector<Write> Take();
  // Writes `batch` to `journal` in order; a failed write is logged and the
  // rest go on (as when the state wrote them itself). Returns the failures.
  static int Apply(std::vector<Write>& batch, JobJournal& journal);

 private:
  mutable Mutex mu_;
  std::vector<Write> queue_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_JOURNAL_OUTBOX_H_
