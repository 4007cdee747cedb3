// The JSON shapes the HTTP API answers with (jobs, events, OpenAI's video
// object), job ids in URLs, and the Prometheus text of /metrics.
#ifndef SLUICE_ORCHESTRATOR_SERVICE_HTTP_VIEWS_H_
#define SLUICE_ORCHESTRATOR_SERVICE_HTTP_VIEWS_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "orchestrator/service/orchestrator_state.h"

namespace sluice::orchestrator {

nlohmann::json JobJson(const JobView& v);
nlohmann::json EventJson(const JobEvent& e);
// OpenAI's video object.
nlohmann::json VideoJson(const JobView& v);
// "job-42" (or "42") -> 42; nullopt if malformed.
std::optional<JobId> ParseJobId(const std::string& s);
std::string JobName(JobId id);
std::string Base64(const std::string& in);
// The orchestrator's Prometheus exposition.
std::string MetricsText(const ServiceStats& s);

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_HTTP_VIEWS_H_
