#include "sluice_cli/role_metrics.h"

#include "common/metrics_text.h"
#include "common/net.h"

namespace sluice::cli {
namespace {

using internal::MetricsText;

void EngineBytes(MetricsText& out, const TransferEngine& engine) {
  out.Family("sluice_engine_bytes_total",
             "Payload bytes this process's transfer engine moved, per transport: by its own ops "
             "(read, write) and by peers' ops on its memory (served_read, served_write; tcp "
             "only).",
             "counter");
  for (const TransportStats& t : engine.TransportCounters()) {
    out.Sample("sluice_engine_bytes_total", {{"transport", t.name}, {"direction", "read"}},
               static_cast<double>(t.bytes_read));
    out.Sample("sluice_engine_bytes_total", {{"transport", t.name}, {"direction", "write"}},
               static_cast<double>(t.bytes_written));
    out.Sample("sluice_engine_bytes_total", {{"transport", t.name}, {"direction", "served_read"}},
               static_cast<double>(t.bytes_served_read));
    out.Sample("sluice_engine_bytes_total", {{"transport", t.name}, {"direction", "served_write"}},
               static_cast<double>(t.bytes_served_written));
  }
}

// Each bucket's newest job as its exemplar (views into `h`).
std::array<internal::MetricExemplar, StageWorkerMetrics::Seconds::kBounds.size() + 1> Exemplars(
    const StageWorkerMetrics::Seconds& h) {
  std::array<internal::MetricExemplar, StageWorkerMetrics::Seconds::kBounds.size() + 1> out;
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = {"job_id", h.exemplars[i].job, h.exemplars[i].seconds};
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<internal::MetricsEndpoint>> StartRoleMetrics(
    const std::string& role, const std::string& listen, int port,
    std::function<std::string(bool openmetrics)> render) {
  if (port < 0) {
    return std::unique_ptr<internal::MetricsEndpoint>();
  }
  SLUICE_ASSIGN_OR_RETURN(internal::HostPort hp, internal::ParseHostPort(listen, true));
  return internal::MetricsEndpoint::Start(role, hp.host, port, std::move(render));
}

std::string WorkerMetricsText(const StageWorkerMetrics& m, DiffusionConnector& connector,
                              const std::vector<const cache::Cache*>& caches, bool openmetrics) {
  MetricsText out(openmetrics);
  const std::string_view stage = m.stage;
  out.Family("sluice_worker_capacity", "Assignments the worker runs at once.", "gauge");
  out.Sample("sluice_worker_capacity", {{"stage", stage}}, m.capacity);
  out.Family("sluice_worker_running", "Assignments running now.", "gauge");
  out.Sample("sluice_worker_running", {{"stage", stage}}, m.running);
  out.Family("sluice_worker_done_total", "Stage runs reported done.", "counter");
  out.Sample("sluice_worker_done_total", {{"stage", stage}}, static_cast<double>(m.done));
  out.Family("sluice_worker_preempted_total", "Runs that yielded after a checkpoint order.",
             "counter");
  out.Sample("sluice_worker_preempted_total", {{"stage", stage}}, static_cast<double>(m.preempted));
  out.Family("sluice_worker_failed_total",
             "Runs and refused assignments reported failed, by status code.", "counter");
  for (const auto& [code, n] : m.failed) {
    out.Sample("sluice_worker_failed_total", {{"stage", stage}, {"code", StatusCodeName(code)}},
               static_cast<double>(n));
  }
  out.Family("sluice_worker_steps_total", "Steps the stage's handlers reported.", "counter");
  out.Sample("sluice_worker_steps_total", {{"stage", stage}}, static_cast<double>(m.steps));
  out.Family("sluice_worker_run_seconds", "Handler run time per assignment.", "histogram");
  out.Histogram("sluice_worker_run_seconds", {{"stage", stage}},
                StageWorkerMetrics::Seconds::kBounds, m.run.counts, m.run.count, m.run.sum,
                Exemplars(m.run));
  out.Family("sluice_worker_step_seconds",
             "Time per step its handlers reported (from the previous step, or the run's start).",
             "histogram");
  out.Histogram("sluice_worker_step_seconds", {{"stage", stage}},
                StageWorkerMetrics::Seconds::kBounds, m.step.counts, m.step.count, m.step.sum,
                Exemplars(m.step));
  const DiffusionConnector::Counters payloads = connector.counters();
  out.Family("sluice_worker_payloads_total",
             "Stage payloads through the worker's connector: consumed (in) and published (out).",
             "counter");
  out.Sample("sluice_worker_payloads_total", {{"stage", stage}, {"direction", "in"}},
             static_cast<double>(payloads.consumed));
  out.Sample("sluice_worker_payloads_total", {{"stage", stage}, {"direction", "out"}},
             static_cast<double>(payloads.published));
  out.Family("sluice_worker_payload_bytes_total",
             "Bytes of the stage payloads the worker consumed (in) and published (out).",
             "counter");
  out.Sample("sluice_worker_payload_bytes_total", {{"stage", stage}, {"direction", "in"}},
             static_cast<double>(payloads.consumed_bytes));
  out.Sample("sluice_worker_payload_bytes_total", {{"stage", stage}, {"direction", "out"}},
             static_cast<double>(payloads.published_bytes));
  EngineBytes(out, connector.engine());
  if (!caches.empty()) {
    for (const auto& [counter, field] : cache::kCacheCounters) {
      const std::string name = std::string("sluice_worker_cache_") + counter + "_total";
      out.Family(name, "This worker's cache counters, per cache kind.", "counter");
      for (const cache::Cache* c : caches) {
        out.Sample(name, {{"stage", stage}, {"kind", c->options().name}},
                   static_cast<double>(c->stats().*field));
      }
    }
  }
  return out.text();
}

std::string StoreNodeMetricsText(const StoreNodeMetrics& m, const TransferEngine& engine,
                                 bool openmetrics) {
  MetricsText out(openmetrics);
  out.Family("sluice_store_node_capacity_bytes", "Memory and disk the node contributes.", "gauge");
  out.Sample("sluice_store_node_capacity_bytes", {{"tier", "memory"}},
             static_cast<double>(m.memory_bytes));
  out.Sample("sluice_store_node_capacity_bytes", {{"tier", "disk"}},
             static_cast<double>(m.disk_bytes));
  out.Gauge("sluice_store_node_registered", "1 once the master accepted the node.",
            m.registered ? 1 : 0);
  out.Family("sluice_store_node_objects", "Objects the master placed on the node, by policy.",
             "gauge");
  for (const auto& [key, h] : m.held) {
    out.Sample("sluice_store_node_objects", {{"policy", key.first}, {"class", key.second}},
               static_cast<double>(h.objects));
  }
  out.Family("sluice_store_node_bytes", "Bytes of the node's objects, by policy and tier.",
             "gauge");
  for (const auto& [key, h] : m.held) {
    out.Sample("sluice_store_node_bytes",
               {{"policy", key.first}, {"class", key.second}, {"tier", "memory"}},
               static_cast<double>(h.memory_bytes));
    out.Sample("sluice_store_node_bytes",
               {{"policy", key.first}, {"class", key.second}, {"tier", "disk"}},
               static_cast<double>(h.disk_bytes));
  }
  out.Counter("sluice_store_node_spills_total", "Objects copied to the disk tier.",
              static_cast<double>(m.spills));
  out.Counter("sluice_store_node_loads_total", "Objects copied back from the disk tier.",
              static_cast<double>(m.loads));
  out.Family("sluice_store_node_disk_bytes_total", "Bytes the disk tier copied.", "counter");
  out.Sample("sluice_store_node_disk_bytes_total", {{"direction", "spilled"}},
             static_cast<double>(m.bytes_spilled));
  out.Sample("sluice_store_node_disk_bytes_total", {{"direction", "loaded"}},
             static_cast<double>(m.bytes_loaded));
  out.Counter("sluice_store_node_disk_failures_total", "Disk-tier copies that failed.",
              static_cast<double>(m.disk_failures));
  EngineBytes(out, engine);
  return out.text();
}

}  // namespace sluice::cli
