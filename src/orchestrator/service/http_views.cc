#include "orchestrator/service/http_views.h"

#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <sstream>

#include "common/base64.h"
#include "common/metrics_text.h"

namespace sluice::orchestrator {

using nlohmann::json;

std::string Base64(const std::string& in) {
  return internal::Base64Encode(in);
}

json JobJson(const JobView& v) {
  json j;
  j["id"] = v.name;
  j["object"] = "job";
  j["kind"] = v.kind;
  j["model"] = v.model;
  j["status"] = JobStatusName(v.status);
  j["stage"] = v.stage;
  // `fraction`: 0..1 through the job's stages (PipelineProgress).
  j["progress"] = {{"step", v.step}, {"steps", v.steps}, {"fraction", v.progress}};
  j["created_at"] = v.created_unix_s;
  if (v.finished_unix_s != 0) {
    j["finished_at"] = v.finished_unix_s;
  }
  if (!v.error.empty()) {
    j["error"] = v.error;
    j["error_type"] = v.error_type;
  }
  if (v.ttff_ms >= 0) {
    j["ttff_ms"] = v.ttff_ms;
  }
  return j;
}

json EventJson(const JobEvent& e) {
  json j = {{"type", e.type}, {"t_ms", e.t_ms}, {"stage", e.stage}};
  if (e.type == "step" || e.type == "preview") {
    j["step"] = e.step;
    j["steps"] = e.steps;
  }
  if (e.type == "preview") {
    // A PNG; only the job's newest preview event still holds one.
    if (!e.detail.empty()) {
      j["image"] = Base64(e.detail);
      j["content_type"] = "image/png";
    }
  } else if (!e.detail.empty()) {
    j["detail"] = e.detail;
  }
  if (!e.timings_ms.empty()) {
    j["timings_ms"] = e.timings_ms;
  }
  if (!e.counts.empty()) {
    j["counts"] = e.counts;
  }
  if (e.worker != 0) {
    j["worker"] = std::to_string(e.worker);  // A string: ids are 64-bit.
  }
  return j;
}

// OpenAI's status for a video in `s`; a cancelled video is failed (with
// the code "cancelled").
std::string_view VideoStatus(JobStatus s) {
  switch (s) {
    case JobStatus::kQueued:
      return "queued";
    case JobStatus::kRunning:
      return "in_progress";
    case JobStatus::kSucceeded:
      return "completed";
    case JobStatus::kFailed:
    case JobStatus::kCancelled:
      return "failed";
  }
  return "failed";
}

// OpenAI's video object.
json VideoJson(const JobView& v) {
  // By the stages' declared kinds (JobView::progress), in whole percent.
  const int progress = static_cast<int>(std::clamp(v.progress, 0.0, 1.0) * 100 + 1e-9);
  // The request as accepted (normalized): seconds, or frames at fps.
  const json req = json::parse(v.request_json, nullptr, false);
  const json r = req.is_object() ? req : json::object();
  const int fps = r.value("fps", 16);
  const int seconds = r.contains("seconds") && r["seconds"].is_number_integer()
                          ? r["seconds"].get<int>()
                          : (r.value("frames", 1) - 1 + fps - 1) / std::max(1, fps);
  json j = {{"id", v.name},
            {"object", "video"},
            {"model", v.model},
            {"status", VideoStatus(v.status)},
            {"progress", progress},
            {"created_at", v.created_unix_s},
            {"completed_at", v.finished_unix_s > 0 ? json(v.finished_unix_s) : json(nullptr)},
            // Finished jobs are kept by count (the newest max_finished_jobs),
            // not by time: no expiry time is known.
            {"expires_at", nullptr},
            {"seconds", std::to_string(seconds)},
            {"size", r.value("size", json("")).is_string() ? r.value("size", "") : ""},
            {"error", nullptr}};
  if (v.status == JobStatus::kCancelled) {
    j["error"] = {{"code", "cancelled"}, {"message", "the video was cancelled"}};
  } else if (!v.error.empty()) {
    j["error"] = {
        {"code", v.error_type == "invalid_request_error" ? "invalid_input" : "generation_failed"},
        {"message", v.error}};
  }
  return j;
}

nlohmann::json AutoscaleJson(const std::vector<PoolRecommendation>& r) {
  nlohmann::json pools = nlohmann::json::array();
  for (const PoolRecommendation& p : r) {
    pools.push_back({{"model", p.model},
                     {"stage", p.stage},
                     {"workers", p.workers},
                     {"recommended", p.recommended},
                     {"utilization", p.utilization},
                     {"queued", p.queued},
                     {"latency_p99_s", p.latency_p99_s}});
  }
  return {{"pools", pools}};
}

json ClusterJson(const ServiceStats& s) {
  json models = json::array();
  for (const PoolStats& p : s.scheduler.pools) {
    if (models.empty() || models.back()["id"] != p.model) {
      models.push_back({{"id", p.model}, {"stages", json::array()}});
    }
    const auto rec = std::find_if(
        s.recommendations.begin(), s.recommendations.end(),
        [&p](const PoolRecommendation& r) { return r.model == p.model && r.stage == p.stage; });
    json by_class = json::object();
    for (int c = 0; c < kClassCount; ++c) {
      by_class[kClassNames[c]] = p.queued_by_class[c];
    }
    const std::size_t busy = p.slots - std::min(p.free_slots, p.slots);
    json stage = {{"stage", p.stage},
                  {"kind", p.kind == StageKind::kAdmission ? "admission" : "work"},
                  {"workers", p.workers},
                  {"slots", p.slots},
                  {"busy", busy},
                  {"credits", p.free_slots},
                  {"reserved", p.reserved},
                  {"queued", p.queued},
                  {"queued_by_class", std::move(by_class)},
                  {"utilization", p.slots == 0 ? 0.0 : static_cast<double>(busy) / p.slots}};
    if (rec != s.recommendations.end()) {
      stage["autoscale"] = {{"recommended", rec->recommended},
                            {"utilization", rec->utilization},
                            {"queued", rec->queued},
                            {"latency_p99_s", rec->latency_p99_s}};
    }
    models.back()["stages"].push_back(std::move(stage));
  }
  json store = nullptr;
  if (s.store.has_value()) {
    const StoreUsage& u = *s.store;
    json classes = json::object();
    for (const auto& [name, c] : u.cache_classes) {
      classes[name] = {
          {"objects", c.objects}, {"bytes", c.bytes}, {"budget_bytes", c.budget_bytes}};
    }
    store = {
        {"answered", s.store_answered},
        {"nodes", u.nodes},
        {"objects", u.objects},
        {"memory",
         {{"capacity_bytes", u.memory_capacity_bytes}, {"used_bytes", u.memory_used_bytes}}},
        {"disk", {{"capacity_bytes", u.disk_capacity_bytes}, {"used_bytes", u.disk_used_bytes}}},
        {"cache_classes", std::move(classes)}};
  }
  return {{"object", "cluster"},
          {"store", std::move(store)},
          {"jobs",
           {{"submitted", s.submitted},
            {"succeeded", s.succeeded},
            {"failed", s.failed},
            {"cancelled", s.cancelled},
            {"rejected", s.rejected},
            {"in_system", s.scheduler.jobs},
            {"running", s.scheduler.running}}},
          {"models", std::move(models)}};
}

std::string MetricsText(const ServiceStats& s, bool openmetrics) {
  internal::MetricsText out(openmetrics);
  // Per pool: one (model, stage).
  auto pool_gauge = [&](const char* name, const char* help, auto value) {
    out.Family(name, help, "gauge");
    for (const PoolStats& p : s.scheduler.pools) {
      out.Sample(name, {{"model", p.model}, {"stage", p.stage}}, static_cast<double>(value(p)));
    }
  };
  pool_gauge("sluice_orchestrator_queued", "Queued stage work.",
             [](const PoolStats& p) { return p.queued; });
  pool_gauge("sluice_orchestrator_workers", "Registered workers.",
             [](const PoolStats& p) { return p.workers; });
  pool_gauge("sluice_orchestrator_free_slots", "Credits advertised by workers, unassigned.",
             [](const PoolStats& p) { return p.free_slots; });
  pool_gauge("sluice_orchestrator_reserved_slots", "Slots held for jobs admitted upstream.",
             [](const PoolStats& p) { return p.reserved; });
  out.Family("sluice_orchestrator_recommended_workers", "Pool size for its load (autoscale).",
             "gauge");
  for (const PoolRecommendation& r : s.recommendations) {
    out.Sample("sluice_orchestrator_recommended_workers", {{"model", r.model}, {"stage", r.stage}},
               r.recommended);
  }
  out.Family("sluice_orchestrator_pool_utilization", "Busy slots over slots, autoscale window.",
             "gauge");
  for (const PoolRecommendation& r : s.recommendations) {
    out.Sample("sluice_orchestrator_pool_utilization", {{"model", r.model}, {"stage", r.stage}},
               r.utilization);
  }
  out.Family("sluice_orchestrator_queued_by_class", "Queued stage work per priority class.",
             "gauge");
  for (const PoolStats& p : s.scheduler.pools) {
    for (int c = 0; c < kClassCount; ++c) {
      out.Sample("sluice_orchestrator_queued_by_class",
                 {{"model", p.model}, {"stage", p.stage}, {"class", kClassNames[c]}},
                 static_cast<double>(p.queued_by_class[c]));
    }
  }
  // The orchestrator's histograms count cumulatively; the writer takes
  // each bucket's own count. Exemplars: each bucket's newest job.
  auto hist = [&](const char* name, const Histogram& h, internal::MetricLabels labels) {
    std::array<std::uint64_t, Histogram::kBuckets.size()> own{};
    std::array<internal::MetricExemplar, Histogram::kBuckets.size() + 1> exemplars;
    for (std::size_t b = 0; b < own.size(); ++b) {
      own[b] = h.counts[b] - (b == 0 ? 0 : h.counts[b - 1]);
    }
    for (std::size_t b = 0; b < exemplars.size(); ++b) {
      exemplars[b] = {"job_id", h.exemplars[b].job, h.exemplars[b].seconds};
    }
    out.Histogram(name, labels, Histogram::kBuckets, own, h.count, h.sum, exemplars);
  };
  out.Family("sluice_orchestrator_job_seconds", "Submission to success.", "histogram");
  hist("sluice_orchestrator_job_seconds", s.job_latency, {});
  out.Family("sluice_orchestrator_ttff_seconds", "Submission to the first decoded frame.",
             "histogram");
  hist("sluice_orchestrator_ttff_seconds", s.ttff, {});
  out.Family("sluice_orchestrator_dispatch_seconds", "Queued to dispatched, per model and stage.",
             "histogram");
  for (const auto& [pool, h] : s.dispatch_latency) {
    hist("sluice_orchestrator_dispatch_seconds", h,
         {{"model", pool.first}, {"stage", pool.second}});
  }
  out.Gauge("sluice_orchestrator_running", "Stage work running on workers.",
            static_cast<double>(s.scheduler.running));
  const std::pair<const char*, const char*> counters[] = {
      {"sluice_orchestrator_jobs_submitted_total", "Jobs accepted."},
      {"sluice_orchestrator_jobs_rejected_total", "Submissions answered 429."},
      {"sluice_orchestrator_jobs_succeeded_total", "Jobs done."},
      {"sluice_orchestrator_jobs_failed_total", "Jobs failed."},
      {"sluice_orchestrator_jobs_cancelled_total", "Jobs cancelled."},
      {"sluice_orchestrator_dispatches_total", "Stage dispatches."},
      {"sluice_orchestrator_preemptions_total", "Checkpoint preemptions."},
      {"sluice_orchestrator_payloads_lost_total", "Store payloads lost; producer re-run."},
      {"sluice_orchestrator_jobs_restored_total", "Unfinished jobs taken back from the journal."},
      {"sluice_orchestrator_cache_skips_total",
       "Jobs that skipped a stage: every condition was cached."},
      {"sluice_orchestrator_cache_reruns_total",
       "Stages re-run because a cached input was evicted before it was read."}};
  const std::uint64_t values[] = {s.submitted,
                                  s.rejected,
                                  s.succeeded,
                                  s.failed,
                                  s.cancelled,
                                  s.scheduler.dispatches,
                                  s.scheduler.preemptions,
                                  s.payloads_lost,
                                  s.restored,
                                  s.cache_skips,
                                  s.cache_reruns};
  for (std::size_t i = 0; i < std::size(counters); ++i) {
    out.Counter(counters[i].first, counters[i].second, static_cast<double>(values[i]));
  }
  out.Family("sluice_orchestrator_condition_lookups_total",
             "Submissions' condition lookups, per request text field.", "counter");
  for (const auto& [field, n] : s.condition_lookups) {
    out.Sample("sluice_orchestrator_condition_lookups_total", {{"field", field}},
               static_cast<double>(n.first));
  }
  out.Family("sluice_orchestrator_condition_hits_total", "Of those, found cached.", "counter");
  for (const auto& [field, n] : s.condition_lookups) {
    out.Sample("sluice_orchestrator_condition_hits_total", {{"field", field}},
               static_cast<double>(n.second));
  }
  // Workers' caches, per cache kind, summed over every worker.
  for (const auto& [field, member] : cache::kCacheCounters) {
    const std::string name = std::string("sluice_cache_") + field + "_total";
    out.Family(name, std::string("Workers' cache ") + field + ", per cache kind.", "counter");
    for (const auto& [kind, c] : s.caches) {
      out.Sample(name, {{"kind", kind}}, static_cast<double>(c.*member));
    }
  }
  out.Family("sluice_worker_transfer_bytes_total",
             "Bytes workers' transfer engines moved, per stage, transport and direction.",
             "counter");
  for (const auto& [key, b] : s.transports) {
    out.Sample("sluice_worker_transfer_bytes_total",
               {{"stage", key.first}, {"transport", key.second}, {"direction", "read"}},
               static_cast<double>(b.read));
    out.Sample("sluice_worker_transfer_bytes_total",
               {{"stage", key.first}, {"transport", key.second}, {"direction", "write"}},
               static_cast<double>(b.written));
  }
  return out.text();
}

}  // namespace sluice::orchestrator
