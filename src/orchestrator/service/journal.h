// The orchestrator's journal of accepted jobs (SQLite, WAL): a job is
// written before its submission is acknowledged and marked finished when it
// ends, so a restarted orchestrator resubmits every unfinished job (from its
// first stage: stage outputs are not journaled). Survives a process crash;
// with synchronous=NORMAL a power loss may drop the last commits.
// Not thread-safe: the caller serializes (OrchestratorState's lock).
#ifndef SLUICE_ORCHESTRATOR_SERVICE_JOURNAL_H_
#define SLUICE_ORCHESTRATOR_SERVICE_JOURNAL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "orchestrator/service/orchestrator_state.h"

struct sqlite3;

namespace sluice::orchestrator {

class Journal : public JobJournal {
 public:
  // Opens or creates the database at `path`. Errors: kUnavailable naming
  // the path and SQLite's message.
  static Result<std::unique_ptr<Journal>> Open(const std::string& path);
  ~Journal() override;

  Status Add(JobId id, const JobRequest& r) override;
  Status Finish(JobId id, std::string_view status) override;
  // Unfinished jobs, oldest first.
  Result<std::vector<std::pair<JobId, JobRequest>>> Unfinished() override;
  Result<JobId> MaxId() override;

 private:
  explicit Journal(sqlite3* db) : db_(db) {}
  Status Exec(const char* sql);
  sqlite3* db_;
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_JOURNAL_H_
