// /metrics of `sluice worker` and `sluice store-node` (--metrics-port):
// their own counters, the transfer engine's bytes, and a worker's caches,
// in the orchestrator's and master's naming scheme (common/metrics_text.h).
#ifndef SLUICE_TOOLS_ROLE_METRICS_H_
#define SLUICE_TOOLS_ROLE_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sluice/cache/cache.h"
#include "sluice/connector/connector.h"
#include "sluice/runtime/stage_worker.h"
#include "sluice/store/store_node.h"
#include "sluice/transfer/engine.h"

#include "common/metrics_endpoint.h"

namespace sluice::cli {

// `role`'s --metrics-port: /metrics on `port` of `listen`'s host, served
// with `render` (its argument: whether the scraper asked for OpenMetrics);
// null when `port` is -1 (none asked for). Errors: a bad `listen`, or the
// port cannot be taken (messages name the role).
Result<std::unique_ptr<internal::MetricsEndpoint>> StartRoleMetrics(
    const std::string& role, const std::string& listen, int port,
    std::function<std::string(bool openmetrics)> render);

// sluice_worker_* of one stage worker (its caches' counters as
// sluice_worker_cache_*_total; the orchestrator's sluice_cache_*_total sum
// every worker's; its connector's payloads as sluice_worker_payloads_total
// and sluice_worker_payload_bytes_total, direction in or out),
// sluice_engine_bytes_total of its connector's engine.
// `openmetrics`: OpenMetrics, with each run and step histogram bucket's
// newest job as its exemplar (job_id); else Prometheus text.
std::string WorkerMetricsText(const StageWorkerMetrics& m, DiffusionConnector& connector,
                              const std::vector<const cache::Cache*>& caches,
                              bool openmetrics = false);
// sluice_store_node_* of one store node, sluice_engine_bytes_total of its
// engine.
std::string StoreNodeMetricsText(const StoreNodeMetrics& m, const TransferEngine& engine,
                                 bool openmetrics = false);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_ROLE_METRICS_H_
