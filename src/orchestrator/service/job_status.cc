#include "orchestrator/service/job_status.h"

#include <array>
#include <string>
#include <utility>

namespace sluice::orchestrator {
namespace {

constexpr std::array<std::pair<JobStatus, std::string_view>, 5> kNames = {{
    {JobStatus::kQueued, "queued"},
    {JobStatus::kRunning, "running"},
    {JobStatus::kSucceeded, "succeeded"},
    {JobStatus::kFailed, "failed"},
    {JobStatus::kCancelled, "cancelled"},
}};

}  // namespace

std::string_view JobStatusName(JobStatus s) {
  for (const auto& [status, name] : kNames) {
    if (status == s) {
      return name;
    }
  }
  return "unknown";
}

std::optional<JobStatus> ParseJobStatus(std::string_view name) {
  for (const auto& [status, n] : kNames) {
    if (n == name) {
      return status;
    }
  }
  return std::nullopt;
}

Result<JobStatus> ParseFinalStatus(std::string_view name, std::string_view what) {
  const std::optional<JobStatus> s = ParseJobStatus(name);
  if (!s.has_value() || !IsFinished(*s)) {
    return Status(StatusCode::kDataLoss, std::string(what) + " finished with status '" +
                                             std::string(name) +
                                             "', not succeeded, failed or cancelled");
  }
  return *s;
}

}  // namespace sluice::orchestrator
