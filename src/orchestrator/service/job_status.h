// A job's status: one type for the job table, the journals and the views.
// Its names ("queued", "running", "succeeded", "failed", "cancelled") are
// what the journals store and the HTTP API shows, so journals written when
// the status was a string read back unchanged.
#ifndef SLUICE_ORCHESTRATOR_SERVICE_JOB_STATUS_H_
#define SLUICE_ORCHESTRATOR_SERVICE_JOB_STATUS_H_

#include <optional>
#include <string_view>

#include "sluice/status.h"

namespace sluice::orchestrator {

enum class JobStatus { kQueued, kRunning, kSucceeded, kFailed, kCancelled };

// The status's name (see above).
std::string_view JobStatusName(JobStatus s);

// The status `name` names; nullopt for any other word (a damaged journal,
// or one a newer version wrote).
std::optional<JobStatus> ParseJobStatus(std::string_view name);

// The final status `name` names, for a journal's reader. Errors:
// kDataLoss naming `what` (e.g. "journal: job 7") and the word, when it is
// not succeeded, failed or cancelled.
Result<JobStatus> ParseFinalStatus(std::string_view name, std::string_view what);

// Whether a job in `s` has finished (succeeded, failed or cancelled).
inline bool IsFinished(JobStatus s) {
  return s == JobStatus::kSucceeded || s == JobStatus::kFailed || s == JobStatus::kCancelled;
}

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_JOB_STATUS_H_
