// The orchestrator's journal of accepted jobs (SQLite, WAL): a job is
// written before its submission is acknowledged and marked finished when it
// ends, so a restarted orchestrator resubmits every unfinished job. Each
// job's progress (its last finished stage's output and store keys, the
// latest checkpointed step after it) is saved as it happens, so the job can
// run on from there; so are the steps a job keeps for edit and resume. Survives a process crash;
// with synchronous=NORMAL a power loss may drop the last commits. Thread-safe: its own lock
// serializes calls (the state calls it under its lock, and writes its outbox after it).
#ifndef SLUICE_ORCHESTRATOR_SERVICE_JOURNAL_H_
#define SLUICE_ORCHESTRATOR_SERVICE_JOURNAL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "orchestrator/service/orchestrator_state.h"

struct sqlite3;

namespace sluice::orchestrator {

// Whether a journaled request keeps its checkpoints (submission wrote the
// flag into its JSON); for every journal kind.
bool KeepsCheckpoints(const std::string& request_json);

// Wall-clock now in Unix milliseconds: the journals' timestamps.
std::int64_t NowUnixMs();

// The final status `journal` stored as `word` for finished job `id`, for
// every journal kind's reader; nullopt, logged with the journal, the job
// and the word, when it is not succeeded, failed or cancelled (the reader
// leaves that record out).
std::optional<JobStatus> StoredFinalStatus(std::string_view word, std::string_view journal,
                                           JobId id);

class Journal : public JobJournal {
 public:
  // Opens or creates the database at `path`. Errors: kUnavailable naming
  // the path and SQLite's message.
  static Result<std::unique_ptr<Journal>> Open(const std::string& path);
  ~Journal() override;

  // Every call below fails with kUnavailable naming SQLite's message (disk
  // full, file gone). A failed Add refuses the submission; after any other
  // failure the caller logs it and serves on (a job whose progress was not
  // saved runs from an earlier point after a restart).
  Status Add(JobId id, const JobRequest& r, const std::vector<StageDecl>& model_stages) override;
  // One row per job, replaced on each save; `p.output` and `p.keys` are
  // copied.
  Status SaveProgress(JobId id, const JobProgress& p) override;
  // Marks the job finished, keeps its outcome and result (a BLOB, written
  // under the caller's lock: a large video costs its write time), and drops
  // its progress.
  Status Finish(JobId id, const JobOutcome& outcome) override;
  // Unfinished jobs with their progress, oldest first. A progress row that
  // cannot be read is left out (the job runs from its first stage).
  Result<std::vector<JournaledJob>> Unfinished() override;
  Result<std::vector<FinishedRecord>> Finished(std::size_t keep,
                                               std::int64_t since_unix_s) override;
  Status Keep(const KeptCheckpoint& k) override;
  Result<std::vector<KeptCheckpoint>> Kept() override;
  Status Prune(std::size_t keep, std::int64_t since_unix_s,
               std::int64_t kept_since_unix_ms) override;
  Result<JobId> MaxId() override;

 private:
  explicit Journal(sqlite3* db) : db_(db) {}
  Status Exec(const char* sql);
  // Whether `table` has `column` (names are literals of this file).
  Result<bool> HasColumn(const char* table, const char* column);
  Mutex mu_;  // Every public call holds it.
  sqlite3* db_;
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_JOURNAL_H_
