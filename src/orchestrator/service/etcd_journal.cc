#include "orchestrator/service/etcd_journal.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "orchestrator/service/journal.h"

namespace sluice::orchestrator {
namespace {

using discovery::EtcdWrite;
using nlohmann::json;

constexpr std::size_t kIdDigits = 20;
// etcd caps a transaction's operations (--max-txn-ops, 128 by default).
constexpr std::size_t kMaxTxnWrites = 100;

std::string Dump(const json& j) {
  // Strings come from clients and workers: invalid UTF-8 is replaced.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The id at the end of `key` after `prefix` ("…/job/00000000000000000042").
std::optional<JobId> IdAfter(std::string_view key, std::string_view prefix) {
  if (key.size() < prefix.size() + kIdDigits || key.substr(0, prefix.size()) != prefix) {
    return std::nullopt;
  }
  JobId id = 0;
  const char* b = key.data() + prefix.size();
  auto [end, ec] = std::from_chars(b, b + kIdDigits, id);
  return ec == std::errc() && end == b + kIdDigits ? std::optional<JobId>(id) : std::nullopt;
}

// A JSON object from etcd, or null when it is not one (a foreign or
// damaged entry: left out).
json Object(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json();
}

std::string Str(const json& j, const char* field) {
  auto it = j.find(field);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::int64_t Int(const json& j, const char* field) {
  auto it = j.find(field);
  return it != j.end() && it->is_number_integer() ? it->get<std::int64_t>() : 0;
}

}  // namespace

Result<std::unique_ptr<EtcdJournal>> EtcdJournal::Open(discovery::EtcdClient* etcd, Options o) {
  if (o.prefix.empty() || o.prefix.back() != '/') {
    return InvalidArgumentError("journal in etcd: the prefix '" + o.prefix + "' must end with '/'");
  }
  if (o.max_result_bytes > (std::size_t{1} << 20)) {
    return InvalidArgumentError(
        "journal in etcd: max_result_bytes is at most 1 MiB (etcd's request limit)");
  }
  std::unique_ptr<EtcdJournal> j(new EtcdJournal(etcd, std::move(o)));
  SLUICE_RETURN_IF_ERROR(j->Load());
  return j;
}

std::string EtcdJournal::Key(const char* kind, JobId id) const {
  char digits[kIdDigits + 1];
  std::snprintf(digits, sizeof(digits), "%020llu", static_cast<unsigned long long>(id));
  return o_.prefix + kind + "/" + digits;
}

Status EtcdJournal::Load() {
  SLUICE_ASSIGN_OR_RETURN(std::vector<discovery::EtcdKv> jobs,
                          etcd_->GetPrefix(o_.prefix + "job/", /*keys_only=*/true));
  for (const discovery::EtcdKv& kv : jobs) {
    if (auto id = IdAfter(kv.key, o_.prefix + "job/")) {
      max_id_ = std::max(max_id_, *id);
    }
  }
  SLUICE_ASSIGN_OR_RETURN(std::vector<discovery::EtcdKv> done,
                          etcd_->GetPrefix(o_.prefix + "done/"));
  for (const discovery::EtcdKv& kv : done) {
    if (auto id = IdAfter(kv.key, o_.prefix + "done/")) {
      finished_[*id] = Int(Object(kv.value), "finished_unix_s");
    }
  }
  SLUICE_ASSIGN_OR_RETURN(std::vector<discovery::EtcdKv> kept,
                          etcd_->GetPrefix(o_.prefix + "kept/"));
  for (const discovery::EtcdKv& kv : kept) {
    auto id = IdAfter(kv.key, o_.prefix + "kept/");
    const std::size_t at = o_.prefix.size() + 5 + kIdDigits + 1;
    int step = 0;
    if (id.has_value() && kv.key.size() > at &&
        std::from_chars(kv.key.data() + at, kv.key.data() + kv.key.size(), step).ec ==
            std::errc()) {
      std::int64_t ms = 0;
      std::from_chars(kv.value.data(), kv.value.data() + kv.value.size(), ms);
      kept_[{*id, step}] = ms;
    }
  }
  return Status::Ok();
}

Status EtcdJournal::Write(const std::vector<EtcdWrite>& writes, const std::string& what) {
  Result<bool> ok = etcd_->Txn(writes, o_.fence_key, o_.fence_lease);
  if (!ok.ok()) {
    return ok.status().WithContext("journal in etcd: " + what);
  }
  if (!*ok) {
    return FailedPreconditionError("journal in etcd: " + what + ": this orchestrator no longer " +
                                   "leads (" + o_.fence_key + " is not held under its lease)");
  }
  return Status::Ok();
}

Status EtcdJournal::Add(JobId id, const JobRequest& r, const std::vector<StageDecl>& model_stages) {
  const std::int64_t now = NowUnixMs();
  json j = {{"kind", r.kind},         {"request", r.request_json},
            {"pipeline", r.pipeline}, {"priority", static_cast<int>(r.priority)},
            {"affinity", r.affinity}, {"created_unix_ms", now},
            {"name", r.name},         {"tenant", r.tenant},
            {"model", r.model},       {"model_stages", FormatPipeline(model_stages)}};
  if (r.deadline.has_value()) {
    j["deadline_unix_ms"] = now + r.deadline->count();
  }
  SLUICE_RETURN_IF_ERROR(
      Write({{EtcdWrite::Kind::kPut, Key("job", id), Dump(j)}}, "add job " + std::to_string(id)));
  max_id_ = std::max(max_id_, id);
  return Status::Ok();
}

Status EtcdJournal::SaveProgress(JobId id, const JobProgress& p) {
  // A JSON line, then the output's bytes as they are.
  json j = {{"keys", p.keys}, {"checkpoint_step", p.checkpoint_step}};
  if (p.done.has_value()) {
    j["done"] = *p.done;
  }
  return Write({{EtcdWrite::Kind::kPut, Key("progress", id), Dump(j) + "\n" + p.output}},
               "save the progress of job " + std::to_string(id));
}

Status EtcdJournal::Finish(JobId id, const JobOutcome& o) {
  const bool keep_result = o.status == "succeeded" && o.result.size() <= o_.max_result_bytes;
  const json j = {{"status", o.status},
                  {"error", o.error},
                  {"error_type", o.error_type},
                  {"result_type", o.result_type},
                  {"finished_unix_s", o.finished_unix_s},
                  {"result_bytes", o.result.size()},
                  {"result_kept", keep_result}};
  std::vector<EtcdWrite> writes = {{EtcdWrite::Kind::kPut, Key("done", id), Dump(j)},
                                   {EtcdWrite::Kind::kDelete, Key("progress", id), {}}};
  if (keep_result) {
    writes.push_back({EtcdWrite::Kind::kPut, Key("result", id), std::string(o.result)});
  }
  SLUICE_RETURN_IF_ERROR(Write(writes, "finish job " + std::to_string(id)));
  finished_[id] = o.finished_unix_s;
  return Status::Ok();
}

Result<std::vector<JournaledJob>> EtcdJournal::Unfinished() {
  SLUICE_ASSIGN_OR_RETURN(std::vector<discovery::EtcdKv> jobs,
                          etcd_->GetPrefix(o_.prefix + "job/"));
  SLUICE_ASSIGN_OR_RETURN(std::vector<discovery::EtcdKv> progress,
                          etcd_->GetPrefix(o_.prefix + "progress/"));
  std::map<JobId, const std::string*> progress_of;
  for (const discovery::EtcdKv& kv : progress) {
    if (auto id = IdAfter(kv.key, o_.prefix + "progress/")) {
      progress_of[*id] = &kv.value;
    }
  }
  const std::int64_t now = NowUnixMs();
  std::vector<JournaledJob> out;
  for (const discovery::EtcdKv& kv : jobs) {
    auto id = IdAfter(kv.key, o_.prefix + "job/");
    const json j = Object(kv.value);
    if (!id.has_value() || j.is_null() || finished_.count(*id) != 0) {
      continue;
    }
    JournaledJob job;
    job.id = *id;
    JobRequest& r = job.request;
    r.kind = Str(j, "kind");
    r.request_json = Str(j, "request");
    r.keep_checkpoints = KeepsCheckpoints(r.request_json);
    if (auto p = j.find("pipeline"); p != j.end() && p->is_array()) {
      for (const json& s : *p) {
        if (s.is_string()) {
          r.pipeline.push_back(s.get<std::string>());
        }
      }
    }
    r.priority = static_cast<PriorityClass>(
        std::clamp<std::int64_t>(Int(j, "priority"), 0, kClassCount - 1));
    if (j.contains("deadline_unix_ms")) {
      r.deadline =
          std::chrono::milliseconds(std::max<std::int64_t>(1, Int(j, "deadline_unix_ms") - now));
    }
    r.affinity = Str(j, "affinity");
    r.name = Str(j, "name");
    r.tenant = Str(j, "tenant");
    r.model = Str(j, "model");
    if (const std::string stages = Str(j, "model_stages"); !stages.empty()) {
      Result<std::vector<StageDecl>> decl = ParsePipeline(stages);
      if (!decl.ok()) {
        return decl.status().WithContext("journal in etcd: job " + std::to_string(*id));
      }
      job.model_stages = std::move(*decl);
    }
    if (auto p = progress_of.find(*id); p != progress_of.end()) {
      // Anything unreadable in it only costs the job its progress (it runs
      // from its first stage).
      const std::string& v = *p->second;
      const std::size_t nl = v.find('\n');
      const json pj = nl == std::string::npos ? json() : Object(std::string_view(v).substr(0, nl));
      const auto keys = pj.is_object() ? pj.value("keys", json()) : json();
      const std::string done = pj.is_object() ? Str(pj, "done") : std::string();
      if (!done.empty() && ValidateStageName(done).ok() && keys.is_array() &&
          std::all_of(keys.begin(), keys.end(), [](const json& k) { return k.is_string(); })) {
        job.progress.done = done;
        job.progress.output = v.substr(nl + 1);
        job.progress.keys = keys.get<std::vector<std::string>>();
      }
      if (pj.is_object()) {
        job.progress.checkpoint_step =
            static_cast<int>(std::max<std::int64_t>(0, Int(pj, "checkpoint_step")));
      }
    }
    out.push_back(std::move(job));
  }
  return out;
}

Result<std::vector<FinishedRecord>> EtcdJournal::Finished(std::size_t keep,
                                                          std::int64_t since_unix_s) {
  // The newest `keep` at or after `since`, oldest first.
  std::vector<std::pair<std::int64_t, JobId>> order;
  for (const auto& [id, at] : finished_) {
    if (at >= since_unix_s) {
      order.emplace_back(at, id);
    }
  }
  std::sort(order.begin(), order.end());
  if (order.size() > keep) {
    order.erase(order.begin(), order.end() - static_cast<std::ptrdiff_t>(keep));
  }
  std::vector<FinishedRecord> out;
  for (const auto& [at, id] : order) {
    SLUICE_ASSIGN_OR_RETURN(std::optional<discovery::EtcdKv> job, etcd_->Get(Key("job", id)));
    SLUICE_ASSIGN_OR_RETURN(std::optional<discovery::EtcdKv> done, etcd_->Get(Key("done", id)));
    if (!job.has_value() || !done.has_value()) {
      continue;
    }
    const json j = Object(job->value);
    const json d = Object(done->value);
    if (j.is_null() || d.is_null()) {
      continue;
    }
    FinishedRecord f;
    f.id = id;
    f.request.kind = Str(j, "kind");
    f.request.request_json = Str(j, "request");
    f.request.keep_checkpoints = KeepsCheckpoints(f.request.request_json);
    f.request.name = Str(j, "name");
    f.request.tenant = Str(j, "tenant");
    f.request.model = Str(j, "model");
    f.status = Str(d, "status");
    f.error = Str(d, "error");
    f.error_type = Str(d, "error_type");
    f.result_type = Str(d, "result_type");
    f.created_unix_s = Int(j, "created_unix_ms") / 1000;
    f.finished_unix_s = Int(d, "finished_unix_s");
    if (f.status == "succeeded") {
      SLUICE_ASSIGN_OR_RETURN(std::optional<discovery::EtcdKv> result,
                              etcd_->Get(Key("result", id)));
      if (result.has_value()) {
        f.result = std::move(result->value);
      } else {
        f.result_dropped = Int(d, "result_bytes") > 0;
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

Status EtcdJournal::Keep(const KeptCheckpoint& k) {
  if (kept_.count({k.job, k.step}) != 0) {
    return Status::Ok();  // A second report of the same step.
  }
  SLUICE_RETURN_IF_ERROR(
      Write({{EtcdWrite::Kind::kPut, Key("kept", k.job) + "/" + std::to_string(k.step),
              std::to_string(k.unix_ms)}},
            "keep step " + std::to_string(k.step) + " of job " + std::to_string(k.job)));
  kept_[{k.job, k.step}] = k.unix_ms;
  return Status::Ok();
}

Result<std::vector<KeptCheckpoint>> EtcdJournal::Kept() {
  std::vector<KeptCheckpoint> out;
  for (const auto& [at, ms] : kept_) {
    out.push_back({at.first, at.second, ms});
  }
  return out;
}

void EtcdJournal::ForgetWrites(JobId id, std::vector<EtcdWrite>* writes) {
  for (const char* kind : {"job", "done", "result", "progress"}) {
    writes->push_back({EtcdWrite::Kind::kDelete, Key(kind, id), {}});
  }
  writes->push_back({EtcdWrite::Kind::kDeletePrefix, Key("kept", id) + "/", {}});
}

Status EtcdJournal::Prune(std::size_t keep, std::int64_t since_unix_s,
                          std::int64_t kept_since_unix_ms) {
  std::vector<std::pair<std::int64_t, JobId>> order;
  for (const auto& [id, at] : finished_) {
    order.emplace_back(at, id);
  }
  std::sort(order.begin(), order.end(), std::greater<>());  // Newest first.
  std::vector<JobId> forget;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i >= keep || order[i].first < since_unix_s) {
      forget.push_back(order[i].second);
    }
  }
  std::vector<std::pair<JobId, int>> expired;
  for (const auto& [at, ms] : kept_) {
    if (ms < kept_since_unix_ms) {
      expired.push_back(at);
    }
  }
  // In transactions of at most kMaxTxnWrites writes; the index follows
  // each one that succeeded.
  std::vector<EtcdWrite> writes;
  std::vector<JobId> batch_jobs;
  std::vector<std::pair<JobId, int>> batch_kept;
  auto flush = [&]() -> Status {
    if (writes.empty()) {
      return Status::Ok();
    }
    SLUICE_RETURN_IF_ERROR(Write(writes, "prune"));
    for (JobId id : batch_jobs) {
      finished_.erase(id);
      kept_.erase(kept_.lower_bound({id, 0}), kept_.lower_bound({id + 1, 0}));
    }
    for (const auto& k : batch_kept) {
      kept_.erase(k);
    }
    writes.clear();
    batch_jobs.clear();
    batch_kept.clear();
    return Status::Ok();
  };
  for (JobId id : forget) {
    ForgetWrites(id, &writes);
    batch_jobs.push_back(id);
    if (writes.size() + 5 > kMaxTxnWrites) {
      SLUICE_RETURN_IF_ERROR(flush());
    }
  }
  for (const auto& k : expired) {
    writes.push_back(
        {EtcdWrite::Kind::kDelete, Key("kept", k.first) + "/" + std::to_string(k.second), {}});
    batch_kept.push_back(k);
    if (writes.size() + 5 > kMaxTxnWrites) {
      SLUICE_RETURN_IF_ERROR(flush());
    }
  }
  return flush();
}

Result<JobId> EtcdJournal::MaxId() {
  return max_id_;
}

}  // namespace sluice::orchestrator
