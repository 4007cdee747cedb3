// Jobs that skip their encode stage on cached conditions, and stages re-run
// when a cached input was evicted before its consumer read it.
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "orchestrator/service/orchestrator_state.h"

namespace sluice::orchestrator {

std::string OrchestratorState::WithCacheScope(const std::string& request_json,
                                              const std::string& tenant) const {
  nlohmann::json j = nlohmann::json::parse(request_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return request_json;  // The stages report what is wrong with it.
  }
  const std::string field(cache::kCacheScopeField);
  if (options_.shared_condition_cache || tenant.empty()) {
    if (j.erase(field) == 0) {
      return request_json;
    }
  } else {
    j[field] = tenant;
  }
  return j.dump();
}

void OrchestratorState::DeclareEncoderLocked(const std::vector<std::string>& models,
                                             const std::string& stage,
                                             const cache::ConditionEncoder& e) {
  const std::string params = cache::ParamsToJson(e.params);
  for (const std::string& m : models) {
    auto [it, fresh] = encoders_.try_emplace(m, EncoderDecl{e, stage, false});
    if (fresh) {
      SLUICE_LOG(info, "model '{}': {} workers cache conditions of encoder {} version {}", m, stage,
                 e.id, e.version);
      continue;
    }
    EncoderDecl& d = it->second;
    const bool same = d.stage == stage && d.encoder.id == e.id && d.encoder.version == e.version &&
                      d.encoder.text_fields == e.text_fields &&
                      cache::ParamsToJson(d.encoder.params) == params;
    if (!same && !d.conflict) {
      d.conflict = true;
      SLUICE_LOG(warn,
                 "model '{}': a {} worker declares encoder {} version {}, another {} version "
                 "{}: no job skips encode on cached conditions until the orchestrator restarts",
                 m, stage, e.id, e.version, d.encoder.id, d.encoder.version);
    }
  }
}

std::optional<OrchestratorState::CachedStart> OrchestratorState::CachedStartFor(
    const JobRequest& r) {
  if (!options_.cache_exists || r.pipeline.size() == 1) {
    return std::nullopt;
  }
  EncoderDecl decl;
  {
    MutexLock lock(mu_);
    const std::string& model = r.model.empty() ? options_.default_model : r.model;
    auto it = encoders_.find(model);
    const ModelSpec* spec = scheduler_.FindModel(model);
    if (it == encoders_.end() || it->second.conflict || spec == nullptr ||
        spec->stages.size() < 2) {
      return std::nullopt;
    }
    decl = it->second;
    // Only a job whose first stage is the encoder's, with a stage after it.
    const std::string& first = r.pipeline.empty() ? spec->stages.front().name : r.pipeline.front();
    if (first != decl.stage) {
      return std::nullopt;
    }
  }
  Result<std::vector<std::string>> keys = cache::ConditionKeysFor(decl.encoder, r.request_json);
  if (!keys.ok()) {
    return std::nullopt;  // The encode stage reports what is wrong.
  }
  // Every key is looked up (not only up to the first miss): the per-field
  // hit rates are what a deployment tunes its cache by.
  bool all = true;
  std::vector<bool> found(keys->size());
  for (std::size_t i = 0; i < keys->size(); ++i) {
    Result<bool> there = options_.cache_exists((*keys)[i]);
    found[i] = there.ok() && *there;
    all = all && found[i];
  }
  {
    MutexLock lock(mu_);
    for (std::size_t i = 0; i < found.size() && i < decl.encoder.text_fields.size(); ++i) {
      auto& [looked, hit] = stats_.condition_lookups[decl.encoder.text_fields[i]];
      ++looked;
      hit += found[i] ? 1 : 0;
    }
  }
  if (!all) {
    return std::nullopt;
  }
  return CachedStart{decl.stage, cache::EncodeCachedInput(*keys)};
}

void OrchestratorState::RecordCachesLocked(WorkerRecord& w, const HeartbeatReport& r) {
  for (const CacheReport& c : r.caches) {
    if (c.kind.empty() || c.kind.size() > 32 || w.caches.size() >= 16) {
      continue;  // Bounded: a worker cannot grow the metrics without end.
    }
    cache::CacheStats& s = w.caches[std::string(c.kind)];
    s.lookups = c.lookups;
    s.hits = c.hits;
    s.misses = c.misses;
    s.computes = c.computes;
    s.single_flight_waits = c.single_flight_waits;
    s.takeovers = c.takeovers;
    s.bytes_inserted = c.bytes_inserted;
  }
}

void OrchestratorState::RecordTransportsLocked(WorkerRecord& w, const HeartbeatReport& r) {
  for (const TransportReport& t : r.transports) {
    if (t.transport.empty() || t.transport.size() > 16 || w.transports.size() >= 8) {
      continue;  // Bounded, as the caches are.
    }
    w.transports[std::string(t.transport)] = TransportBytes{t.bytes_read, t.bytes_written};
  }
}

void OrchestratorState::RetireCachesLocked(const WorkerRecord& w, const std::string& stage) {
  for (const auto& [kind, c] : w.caches) {
    retired_caches_[kind] += c;
  }
  for (const auto& [transport, b] : w.transports) {
    retired_transports_[{stage, transport}] += b;
  }
}

bool OrchestratorState::RerunOnEvictedInputLocked(JobRecord& j, const FailedReport& r,
                                                  TimePoint now) {
  if (r.code != StatusCode::kNotFound) {
    return false;
  }
  const std::vector<std::string>& pipeline = j.request.pipeline;
  const auto at = std::find(pipeline.begin(), pipeline.end(), j.view.stage);
  if (at == pipeline.begin() || at == pipeline.end()) {
    return false;
  }
  const std::string& producer = *(at - 1);
  auto input = j.outputs.find(producer);
  if (input == j.outputs.end() || !cache::IsCachedInput(input->second) ||
      j.cache_reruns >= options_.max_cache_reruns) {
    return false;
  }
  if (Status s = scheduler_.PayloadLost(j.view.id, producer, now); !s.ok()) {
    const internal::LogFields fields{{"job", j.view.name}, {"stage", producer}};
    SLUICE_LOG(warn, "job {}: evicted cached input not re-run: {}", j.view.name, s.ToString());
    return false;
  }
  ++j.cache_reruns;
  ++stats_.cache_reruns;
  j.outputs.erase(input);
  EventLocked(j, now, "cache_evicted", producer + " runs again: " + std::string(r.reason));
  return true;
}

}  // namespace sluice::orchestrator
