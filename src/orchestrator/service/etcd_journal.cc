#include "orchestrator/service/etcd_journal.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "common/log.h"
#include "orchestrator/service/journal.h"

namespace sluice::orchestrator {
namespace {

using discovery::EtcdWrite;
using nlohmann::json;

constexpr std::size_t kIdDigits = 20;
// etcd caps a transaction's operations (--max-txn-ops, 128 by default)
// and its size (--max-request-bytes, 1.5 MiB, values in base64): groups are
// packed up to these (a single larger group goes alone).
constexpr std::size_t kMaxTxnWrites = 100;
constexpr std::size_t kMaxTxnBytes = std::size_t{1} << 20;
// Queued writes that do not wait, at most.
constexpr std::size_t kMaxQueued = 4096;
constexpr std::size_t kMaxQueuedBytes = std::size_t{64} << 20;

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

// Whether `g` deletes a range (Prune, Drop): such a group is committed
// alone, as etcd refuses a transaction whose range holds a key it writes.
bool HasRange(const auto& g) {
  return std::any_of(g.writes.begin(), g.writes.end(),
                     [](const EtcdWrite& w) { return w.kind == EtcdWrite::Kind::kDeletePrefix; });
}

// A journal failure's message past its "journal in etcd: WHAT: " prefix.
std::string_view Reason(const Status& s) {
  std::string_view m = s.message();
  constexpr std::string_view kPrefix = "journal in etcd: ";
  if (m.substr(0, kPrefix.size()) == kPrefix) {
    m.remove_prefix(kPrefix.size());
    const std::size_t colon = m.find(": ");
    m.remove_prefix(colon == std::string_view::npos ? 0 : colon + 2);
  }
  return m;
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
  j->writer_ = std::thread([p = j.get()] { p->Run(); });
  return j;
}

EtcdJournal::~EtcdJournal() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  if (writer_.joinable()) {
    writer_.join();  // It commits what is queued first.
  }
}

std::string EtcdJournal::Key(const char* kind, JobId id) const {
  char digits[kIdDigits + 1];
  std::snprintf(digits, sizeof(digits), "%020llu", static_cast<unsigned long long>(id));
  return o_.prefix + kind + "/" + digits;
}

Status EtcdJournal::Load() {
  MutexLock lock(mu_);  // Alone: the writer starts after.
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
  transactions_.fetch_add(1);
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

Status EtcdJournal::Enqueue(std::vector<EtcdWrite> writes, std::string what, bool wait) {
  Group g;
  for (const EtcdWrite& w : writes) {
    g.bytes += w.key.size() + w.value.size();
  }
  g.writes = std::move(writes);
  g.waited = wait;
  MutexLock lock(mu_);
  if (fenced_out_) {
    return FailedPreconditionError("journal in etcd: " + what + ": this orchestrator no longer " +
                                   "leads (" + o_.fence_key + " is not held under its lease)");
  }
  if (stopping_) {
    return UnavailableError("journal in etcd: " + what + ": the journal is closing",
                            FailureScope::kEndpoint);
  }
  if (!wait && (queue_.size() >= kMaxQueued || queued_bytes_ + g.bytes > kMaxQueuedBytes)) {
    return UnavailableError("journal in etcd: " + what + ": " + std::to_string(queue_.size()) +
                                " writes (" + std::to_string(queued_bytes_) +
                                " bytes) already wait for etcd",
                            FailureScope::kEndpoint);
  }
  g.what = std::move(what);
  g.seq = ++enqueued_;
  const std::uint64_t seq = g.seq;
  queued_bytes_ += g.bytes;
  queue_.push_back(std::move(g));
  cv_.NotifyAll();
  if (!wait) {
    return Status::Ok();
  }
  cv_.Wait(lock, [&] {
    mu_.AssertHeld();
    return done_ >= seq;
  });
  auto it = results_.find(seq);
  Status s = it == results_.end() ? InternalError("journal in etcd: a lost result") : it->second;
  if (it != results_.end()) {
    results_.erase(it);
  }
  return s;
}

void EtcdJournal::Run() {
  std::vector<Group> batch;
  std::vector<Status> statuses;
  for (;;) {
    batch.clear();
    {
      MutexLock lock(mu_);
      cv_.Wait(lock, [&] {
        mu_.AssertHeld();
        return stopping_ || !queue_.empty();
      });
      if (queue_.empty()) {
        return;  // Stopping, with nothing left to write.
      }
      while (!queue_.empty()) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_bytes_ = 0;
    }
    statuses.assign(batch.size(), Status::Ok());
    for (std::size_t i = 0; i < batch.size();) {
      std::size_t end = i + 1;
      std::size_t writes = batch[i].writes.size(), bytes = batch[i].bytes;
      while (end < batch.size() && !HasRange(batch[i]) && !HasRange(batch[end]) &&
             writes + batch[end].writes.size() <= kMaxTxnWrites &&
             bytes + batch[end].bytes <= kMaxTxnBytes) {
        writes += batch[end].writes.size();
        bytes += batch[end].bytes;
        ++end;
      }
      Commit(batch, i, end, &statuses);
      const Status& last = statuses[end - 1];
      if (last.code() == StatusCode::kUnavailable ||
          last.code() == StatusCode::kFailedPrecondition) {
        // etcd is unreachable (each try waits out the client's timeout) or
        // another orchestrator leads: the rest of the batch fails with it
        // unsent, so a journal with etcd down neither stalls its
        // submissions nor its shutdown for a timeout per transaction.
        for (std::size_t k = end; k < batch.size(); ++k) {
          statuses[k] = Status(last.code(), "journal in etcd: " + batch[k].what + ": not sent (" +
                                                std::string(Reason(last)) + ")");
        }
        end = batch.size();
      }
      i = end;
    }
    MutexLock lock(mu_);
    std::size_t failed = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const Status& s = statuses[i];
      fenced_out_ = fenced_out_ || s.code() == StatusCode::kFailedPrecondition;
      if (batch[i].waited) {
        results_[batch[i].seq] = s;
      } else if (!s.ok()) {
        if (failed++ == 0) {
          SLUICE_LOG(error, "{}", s.ToString());
        }
        if (unreported_.ok()) {
          unreported_ = s;
        }
      }
    }
    if (failed > 1) {  // One line a batch, however many writes it held.
      SLUICE_LOG(error, "journal in etcd: {} more queued writes not saved", failed - 1);
    }
    done_ = batch.back().seq;
    cv_.NotifyAll();
  }
}

void EtcdJournal::Commit(const std::vector<Group>& batch, std::size_t begin, std::size_t end,
                         std::vector<Status>* out) {
  if (end - begin == 1) {
    (*out)[begin] = Write(batch[begin].writes, batch[begin].what);
    return;
  }
  // etcd refuses a transaction that names a key twice: a later write of a
  // key replaces the earlier one (in queue order, so the last one stands).
  std::vector<EtcdWrite> writes;
  std::unordered_map<std::string_view, std::size_t> at;
  for (std::size_t i = begin; i < end; ++i) {
    for (const EtcdWrite& w : batch[i].writes) {
      auto [it, fresh] = at.try_emplace(w.key, writes.size());
      if (fresh) {
        writes.push_back(w);
      } else {
        writes[it->second] = w;
      }
    }
  }
  const Status s = Write(writes, std::to_string(end - begin) + " writes");
  if (s.ok() || s.code() == StatusCode::kFailedPrecondition ||
      s.code() == StatusCode::kUnavailable) {
    for (std::size_t i = begin; i < end; ++i) {
      (*out)[i] = s.ok() ? s
                         : Status(s.code(), "journal in etcd: " + batch[i].what + ": " +
                                                std::string(Reason(s)));
    }
    return;
  }
  // etcd refused the request (a limit it counts differently): one bad
  // group must not cost the others, so each goes alone.
  for (std::size_t i = begin; i < end; ++i) {
    (*out)[i] = Write(batch[i].writes, batch[i].what);
  }
}

Status EtcdJournal::Flush() {
  MutexLock lock(mu_);
  const std::uint64_t upto = enqueued_;
  cv_.Wait(lock, [&] {
    mu_.AssertHeld();
    return done_ >= upto;
  });
  Status s = unreported_;
  unreported_ = Status::Ok();
  return s;
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
  SLUICE_RETURN_IF_ERROR(Enqueue({{EtcdWrite::Kind::kPut, Key("job", id), Dump(j)}},
                                 "add job " + std::to_string(id), /*wait=*/true));
  MutexLock lock(mu_);
  max_id_ = std::max(max_id_, id);
  return Status::Ok();
}

Status EtcdJournal::SaveProgress(JobId id, const JobProgress& p) {
  // A JSON line, then the output's bytes as they are.
  json j = {{"keys", p.keys}, {"checkpoint_step", p.checkpoint_step}};
  if (p.done.has_value()) {
    j["done"] = *p.done;
  }
  return Enqueue({{EtcdWrite::Kind::kPut, Key("progress", id), Dump(j) + "\n" + p.output}},
                 "save the progress of job " + std::to_string(id), /*wait=*/false);
}

Status EtcdJournal::Finish(JobId id, const JobOutcome& o) {
  const bool keep_result =
      o.status == JobStatus::kSucceeded && o.result.size() <= o_.max_result_bytes;
  const json j = {{"status", JobStatusName(o.status)},
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
  SLUICE_RETURN_IF_ERROR(Enqueue(std::move(writes), "finish job " + std::to_string(id),
                                 /*wait=*/false));
  MutexLock lock(mu_);
  finished_[id] = o.finished_unix_s;
  return Status::Ok();
}

Result<std::vector<JournaledJob>> EtcdJournal::Unfinished() {
  (void)Flush();  // Its failures were logged; what is in etcd is read.
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
  MutexLock lock(mu_);
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
  (void)Flush();  // Its failures were logged; what is in etcd is read.
  // The newest `keep` at or after `since`, oldest first.
  std::vector<std::pair<std::int64_t, JobId>> order;
  {
    MutexLock lock(mu_);
    for (const auto& [id, at] : finished_) {
      if (at >= since_unix_s) {
        order.emplace_back(at, id);
      }
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
    const std::optional<JobStatus> status = StoredFinalStatus(Str(d, "status"), "etcd journal", id);
    if (!status.has_value()) {
      continue;
    }
    f.status = *status;
    f.error = Str(d, "error");
    f.error_type = Str(d, "error_type");
    f.result_type = Str(d, "result_type");
    f.created_unix_s = Int(j, "created_unix_ms") / 1000;
    f.finished_unix_s = Int(d, "finished_unix_s");
    if (f.status == JobStatus::kSucceeded) {
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
  {
    MutexLock lock(mu_);
    if (kept_.count({k.job, k.step}) != 0) {
      return Status::Ok();  // A second report of the same step.
    }
  }
  SLUICE_RETURN_IF_ERROR(
      Enqueue({{EtcdWrite::Kind::kPut, Key("kept", k.job) + "/" + std::to_string(k.step),
                std::to_string(k.unix_ms)}},
              "keep step " + std::to_string(k.step) + " of job " + std::to_string(k.job),
              /*wait=*/false));
  MutexLock lock(mu_);
  kept_[{k.job, k.step}] = k.unix_ms;
  return Status::Ok();
}

Result<std::vector<KeptCheckpoint>> EtcdJournal::Kept() {
  MutexLock lock(mu_);
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
  std::vector<std::vector<EtcdWrite>> txns(1);
  {
    MutexLock lock(mu_);
    std::vector<std::pair<std::int64_t, JobId>> order;
    for (const auto& [id, at] : finished_) {
      order.emplace_back(at, id);
    }
    std::sort(order.begin(), order.end(), std::greater<>());  // Newest first.
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (i >= keep || order[i].first < since_unix_s) {
        const JobId id = order[i].second;
        ForgetWrites(id, &txns.back());
        finished_.erase(id);
        kept_.erase(kept_.lower_bound({id, 0}), kept_.lower_bound({id + 1, 0}));
        if (txns.back().size() + 5 > kMaxTxnWrites) {
          txns.emplace_back();
        }
      }
    }
    for (auto it = kept_.begin(); it != kept_.end();) {
      if (it->second < kept_since_unix_ms) {
        txns.back().push_back(
            {EtcdWrite::Kind::kDelete,
             Key("kept", it->first.first) + "/" + std::to_string(it->first.second),
             {}});
        it = kept_.erase(it);
        if (txns.back().size() + 5 > kMaxTxnWrites) {
          txns.emplace_back();
        }
      } else {
        ++it;
      }
    }
  }
  // In transactions of at most kMaxTxnWrites writes. The index forgot them
  // already: one that fails is pruned again only after a restart.
  for (std::vector<EtcdWrite>& writes : txns) {
    if (!writes.empty()) {
      SLUICE_RETURN_IF_ERROR(Enqueue(std::move(writes), "prune", /*wait=*/false));
    }
  }
  return Status::Ok();
}

Status EtcdJournal::Drop(JobId id) {
  std::vector<EtcdWrite> writes;
  {
    MutexLock lock(mu_);
    ForgetWrites(id, &writes);
    finished_.erase(id);
    kept_.erase(kept_.lower_bound({id, 0}), kept_.lower_bound({id + 1, 0}));
  }
  return Enqueue(std::move(writes), "drop job " + std::to_string(id), /*wait=*/false);
}

Result<JobId> EtcdJournal::MaxId() {
  MutexLock lock(mu_);
  return max_id_;
}

}  // namespace sluice::orchestrator
