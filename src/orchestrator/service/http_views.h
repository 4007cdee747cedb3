// The JSON shapes the HTTP API answers with (jobs, events, OpenAI's video
// object; jobs go by their public names) and the Prometheus text of
// /metrics.
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
std::string Base64(const std::string& in);
// {"pools": [{model, stage, workers, recommended, utilization, queued}]}.
nlohmann::json AutoscaleJson(const std::vector<PoolRecommendation>& r);
// What the console's cluster view shows: each model's
// pools (stage, kind, workers, slots, busy, credits — free slots —,
// reserved, queued in all and per class, utilization now, and the
// autoscaler's latest decision when it made one), the job counters, and
// the store's usage (null without a store or before its master answered).
// {"object": "cluster", "store": {...}, "jobs": {...}, "models": [...]}.
nlohmann::json ClusterJson(const ServiceStats& s);
// The orchestrator's /metrics: Prometheus text, or OpenMetrics with each
// latency bucket's newest job as its exemplar (job_id) when `openmetrics`.
std::string MetricsText(const ServiceStats& s, bool openmetrics = false);

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_HTTP_VIEWS_H_
