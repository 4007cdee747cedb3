#include "orchestrator/service/orchestrator_state.h"

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "common/mutex.h"
#include "common/random.h"
#include "orchestrator/core/worker_session.h"
#include "orchestrator/service/journal_outbox.h"
#include "orchestrator/service/output_check.h"

namespace sluice::orchestrator {

TimePoint OrchestratorState::Now() const {
  return options_.now ? options_.now() : Clock::now();
}

std::int64_t OrchestratorState::UnixNow() const {
  return UnixNowMs() / 1000;
}

std::int64_t OrchestratorState::UnixNowMs() const {
  if (options_.unix_ms) {
    return options_.unix_ms();
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

OrchestratorState::OrchestratorState(ServiceOptions o, JobJournal* journal, ResultDir* results)
    : options_(std::move(o)),
      journal_(journal),
      results_(results),
      outbox_(std::make_unique<JournalOutbox>()),
      scheduler_(options_.scheduler),
      autoscaler_(options_.autoscale),
      registry_(options_.worker_timeout),
      checkpoints_(options_.checkpoint_retention) {
  for (const ModelSpec& m : options_.models) {
    if (Status s = DeclareModel(m); !s.ok()) {
      SLUICE_LOG(error, "model '{}' not declared: {}", m.name, s.ToString());
    }
  }
  if (!options_.default_model.empty() && scheduler_.FindModel(options_.default_model) == nullptr) {
    if (Status s = DeclareModel({options_.default_model, StandardPipeline()}); !s.ok()) {
      SLUICE_LOG(error, "default model not declared: {}", s.ToString());
    }
  }
}

OrchestratorState::~OrchestratorState() {
  WriteJournal();
}

void OrchestratorState::WriteJournal() {
  if (journal_ == nullptr || !outbox_->pending()) {
    return;
  }
  // Batches are taken and written under one lock: written in the order
  // they were decided.
  MutexLock lock(journal_write_mu_);
  std::vector<JournalOutbox::Write> batch = outbox_->Take();
  JournalOutbox::Apply(batch, *journal_);
}

Status OrchestratorState::DeclareModel(const ModelSpec& m) {
  MutexLock lock(mu_);
  SLUICE_RETURN_IF_ERROR(scheduler_.DeclareModel(m));
  model_declared_unix_s_.try_emplace(m.name, UnixNow());
  return Status::Ok();
}

std::vector<ModelView> OrchestratorState::Models() {
  MutexLock lock(mu_);
  std::vector<ModelView> out;
  for (const ModelSpec* m : scheduler_.Models()) {
    out.push_back(
        {m->name, m->stages, scheduler_.WorkersPerStage(m->name), model_declared_unix_s_[m->name]});
  }
  return out;
}

namespace {

// A Done's timings as a stage_done event shows them: at most 8 names of
// 1..32 of [a-z_] with values in [0, 1e7] ms; anything else a worker sends
// is dropped.
std::map<std::string, double> CheckedTimings(const DoneReport& r) {
  std::map<std::string, double> out;
  for (const auto& [name, ms] : r.timings_ms) {
    if (IsTimingName(name) && ms >= 0 && ms <= kMaxTimingMs && out.size() < kMaxTimings) {
      out.emplace(name, ms);
    }
  }
  return out;
}

// A Done's counts as a stage_done event shows them, checked as timings are.
std::map<std::string, std::int64_t> CheckedCounts(const DoneReport& r) {
  std::map<std::string, std::int64_t> out;
  for (const auto& [name, n] : r.counts) {
    if (IsTimingName(name) && n >= 0 && n <= kMaxCount && out.size() < kMaxCounts) {
      out.emplace(name, n);
    }
  }
  return out;
}

}  // namespace

void OrchestratorState::EventLocked(JobRecord& j, TimePoint now, std::string type,
                                    std::string detail) {
  JobEvent e;
  e.t_ms = std::chrono::duration<double, std::milli>(now - j.submitted).count();
  e.type = std::move(type);
  e.stage = j.view.stage;
  e.step = j.view.step;
  e.steps = j.view.steps;
  e.detail = std::move(detail);
  j.view.events.push_back(std::move(e));
  cv_.NotifyAll();
  watchers_.Wake(j.view.id);
}

void OrchestratorState::PreviewLocked(JobRecord& j, const StepReport& p, TimePoint now) {
  constexpr std::string_view kPngMagic("\x89PNG\r\n\x1a\n", 8);
  if (j.view.finished() || p.preview.size() > kMaxPreviewBytes ||
      p.preview.substr(0, 8) != kPngMagic) {
    return;
  }
  j.preview.png = p.preview;
  j.preview.step = static_cast<int>(p.preview_step);
  if (j.preview_event < j.view.events.size() && j.view.events[j.preview_event].type == "preview") {
    j.view.events[j.preview_event].detail.clear();
  }
  EventLocked(j, now, "preview", j.preview.png);
  j.view.events.back().step = j.preview.step;
  j.preview_event = j.view.events.size() - 1;
}

std::uint64_t OrchestratorState::Watch(JobId id, std::function<void()> wake) {
  MutexLock lock(mu_);
  if (jobs_.count(id) == 0) {
    return 0;
  }
  return watchers_.Add(id, std::move(wake));
}

void OrchestratorState::Unwatch(std::uint64_t token) {
  std::function<void()> dropped;  // Destroyed outside the lock.
  MutexLock lock(mu_);
  dropped = watchers_.Remove(token);
}

std::string OrchestratorState::DefaultSize(const std::string& model, bool video) {
  MutexLock lock(mu_);
  auto it = model_sizes_.find(model.empty() ? options_.default_model : model);
  if (it == model_sizes_.end()) {
    return "";
  }
  return video ? it->second.video : it->second.image;
}

bool OrchestratorState::TakesPicture(const std::string& model) {
  MutexLock lock(mu_);
  auto it = model_sizes_.find(model.empty() ? options_.default_model : model);
  return it != model_sizes_.end() && it->second.picture;
}

Result<WorkerId> OrchestratorState::Register(Registration r, std::string* session_secret) {
  const JournalFlush flush(this);  // After the lock is released.
  SLUICE_RETURN_IF_ERROR(ValidateStageName(r.stage));
  if (r.capacity < 1 || r.capacity > 1024) {
    return InvalidArgumentError("capacity must be in 1..1024");
  }
  if (r.models.empty()) {
    r.models.push_back(options_.default_model);
  }
  if (r.models.size() > 64) {
    return InvalidArgumentError("a worker serves at most 64 models, not " +
                                std::to_string(r.models.size()));
  }
  for (const std::string& m : r.models) {
    SLUICE_RETURN_IF_ERROR(ValidateModelName(m));
  }
  if (!r.pipeline.empty()) {
    SLUICE_RETURN_IF_ERROR(ValidateModel({r.models.front(), r.pipeline}));
  }
  if (r.condition_encoder.has_value()) {
    SLUICE_RETURN_IF_ERROR(cache::Validate(*r.condition_encoder).WithContext("condition_encoder"));
  }
  SLUICE_RETURN_IF_ERROR(ValidateDeclaredSizes(r.image_size, r.video_size));
  const TimePoint now = Now();
  MutexLock lock(mu_);
  for (const std::string& m : r.models) {
    const ModelSpec* known = scheduler_.FindModel(m);
    if (known == nullptr) {
      SLUICE_RETURN_IF_ERROR(
          scheduler_.DeclareModel({m, r.pipeline.empty() ? StandardPipeline() : r.pipeline}));
      model_declared_unix_s_.try_emplace(m, UnixNow());
      SLUICE_LOG(info, "model '{}' declared by a worker: {}", m,
                 FormatPipeline(scheduler_.FindModel(m)->stages));
    } else if (!r.pipeline.empty() && known->stages != r.pipeline) {
      return InvalidArgumentError("pipeline: model '" + m + "' is declared as " +
                                  FormatPipeline(known->stages) + "; this worker declares " +
                                  FormatPipeline(r.pipeline));
    }
  }
  SLUICE_ASSIGN_OR_RETURN(const std::optional<WorkerId> replaced,
                          instances_.Admit(r.instance, r.attempt));
  if (replaced.has_value()) {
    if (auto old = workers_.find(*replaced); old != workers_.end()) {
      SLUICE_LOG(info, "worker {} ({}) registered again: the older registration goes", old->first,
                 registry_.Find(old->first)->stage);
      LoseWorkerLocked(old, now, "registered again");
    }
  }
  const WorkerId id = registry_.NewId();
  std::string secret(kSessionSecretBytes, '\0');
  internal::RandomBytes(secret.data(), secret.size());
  SLUICE_RETURN_IF_ERROR(scheduler_.WorkerUp(
      id, WorkerSpec{r.models, r.stage, r.capacity, std::move(r.labels), r.assignment_timeout},
      now));
  WorkerRecord& w = workers_[id];
  if (r.condition_encoder.has_value()) {
    DeclareEncoderLocked(r.models, r.stage, *r.condition_encoder);
  }
  for (const std::string& m : r.models) {  // The latest declaration holds.
    ModelSizes& sizes = model_sizes_[m];
    sizes.image = r.image_size.empty() ? sizes.image : r.image_size;
    sizes.video = r.video_size.empty() ? sizes.video : r.video_size;
    sizes.picture = sizes.picture || r.takes_picture;
  }
  registry_.Add(id, r.stage, r.capacity, r.instance, now);
  w.session = std::make_shared<internal::CallVerifier>(secret, std::chrono::seconds(60),
                                                       std::size_t{1} << 16, "session secret");
  instances_.Bind(r.instance, r.attempt, id);
  ApplyLocked(now);
  if (session_secret != nullptr) {
    *session_secret = std::move(secret);
  }
  return id;
}

Status OrchestratorState::ProveWorker(WorkerId id, std::string_view method,
                                      std::string_view proof) {
  std::shared_ptr<internal::CallVerifier> session;
  {
    MutexLock lock(mu_);
    auto it = workers_.find(id);
    if (it == workers_.end()) {
      return NotFoundError("unknown worker " + std::to_string(id) + " (register again)");
    }
    session = it->second.session;
  }
  if (proof.empty()) {
    return PermissionDeniedError("worker " + std::to_string(id) +
                                 ": the call carries no session proof");
  }
  // Checked unlocked: an HMAC per call, and its own nonce memory.
  if (Status s = session->Verify(method, proof, internal::UnixMillis()); !s.ok()) {
    return PermissionDeniedError("worker " + std::to_string(id) + ": " + std::string(s.message()));
  }
  return Status::Ok();
}

Status OrchestratorState::Attach(WorkerId id, const void* stream, Sink sink,
                                 std::function<void()> closed) {
  MutexLock lock(mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return NotFoundError("unknown worker " + std::to_string(id) + " (register again)");
  }
  if (it->second.closed && it->second.stream != stream) {
    it->second.closed();  // The worker reconnected: its old stream ends.
  }
  it->second.stream = stream;
  it->second.sink = std::move(sink);
  it->second.closed = std::move(closed);
  while (!it->second.pending.empty()) {
    it->second.sink(it->second.pending.front());
    it->second.pending.pop_front();
  }
  return Status::Ok();
}

void OrchestratorState::Detach(WorkerId id, const void* stream) {
  MutexLock lock(mu_);
  auto it = workers_.find(id);
  if (it != workers_.end() && it->second.stream == stream) {
    it->second.sink = nullptr;
    it->second.closed = nullptr;
    it->second.stream = nullptr;
  }
}

void OrchestratorState::SendLocked(WorkerId id, AssignmentOrder a) {
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return;
  }
  if (it->second.sink) {
    it->second.sink(a);
  } else {
    it->second.pending.push_back(std::move(a));
  }
}

Status OrchestratorState::Heartbeat(const HeartbeatReport& r) {
  const JournalFlush flush(this);  // After the lock is released.
  const TimePoint now = Now();
  MutexLock lock(mu_);
  auto it = workers_.find(r.worker);
  if (it == workers_.end()) {
    return NotFoundError("unknown worker " + std::to_string(r.worker) + " (register again)");
  }
  registry_.Heard(it->first, now);
  RecordCachesLocked(it->second, r);
  RecordTransportsLocked(it->second, r);
  if (r.draining) {
    (void)scheduler_.Draining(r.worker, now);
  }
  // Free slots counted before a report this state already processed are
  // stale: that report gave the slot back.
  if (!r.reports.has_value() || *r.reports >= registry_.Find(it->first)->reports) {
    (void)scheduler_.Credits(r.worker,
                             static_cast<int>(std::min<std::uint32_t>(r.free_slots, 1024)), now);
  }
  for (const StepReport& p : r.progress) {
    ProgressLocked(r.worker, p, now);
  }
  for (JobId id : r.first_output) {
    FirstOutputLocked(id, now);
  }
  ApplyLocked(now);
  return Status::Ok();
}

void OrchestratorState::ProgressLocked(WorkerId w, const StepReport& p, TimePoint now) {
  const int step = static_cast<int>(p.step);
  if (!scheduler_.Progress(p.job, w, step, p.checkpointed, now).ok()) {
    return;  // Stale: the job moved on.
  }
  auto j = jobs_.find(p.job);
  if (j == jobs_.end()) {
    return;
  }
  JobRecord& rec = j->second;
  if (p.checkpointed && rec.request.keep_checkpoints) {
    KeepLocked(rec, step, now);
  }
  if (p.checkpointed && step > rec.saved.checkpoint_step) {
    rec.saved.checkpoint_step = step;
    SaveProgressLocked(rec);
  }
  if (rec.view.step != step) {
    rec.view.step = step;
    rec.view.steps = static_cast<int>(p.steps);
    EventLocked(rec, now, "step");
  }
  if (!p.preview.empty()) {
    PreviewLocked(rec, p, now);
  }
}

void OrchestratorState::FirstOutputLocked(std::uint64_t job, TimePoint now) {
  auto j = jobs_.find(job);
  if (j != jobs_.end() && j->second.view.ttff_ms < 0 && !j->second.view.finished()) {
    const double s = std::chrono::duration<double>(now - j->second.submitted).count();
    j->second.view.ttff_ms = s * 1000;
    stats_.ttff.Add(s, j->second.view.name);
    EventLocked(j->second, now, "first_output");
  }
}

void OrchestratorState::CountReportLocked(WorkerId w) {
  registry_.CountReport(w);
}

Status OrchestratorState::Done(const DoneReport& r) {
  const JournalFlush flush(this);  // After the lock is released.
  // A final output is checked outside the lock: decoding it takes
  // milliseconds for a large image, and every other call waits on the lock.
  Status bad = Status::Ok();
  if (options_.check_outputs) {
    std::optional<JobRequest> asked;
    {
      MutexLock lock(mu_);
      auto j = jobs_.find(r.job);
      if (j != jobs_.end() && !j->second.view.finished() &&
          j->second.view.stage == j->second.request.pipeline.back()) {
        asked = j->second.request;
      }
    }
    if (asked.has_value()) {
      bad = CheckOutput(asked->kind, asked->request_json, r.output_type, r.output);
    }
  }
  const TimePoint now = Now();
  MutexLock lock(mu_);
  // What the stage reported since its last heartbeat goes first, as that
  // heartbeat would have (its last step, its first output).
  for (const StepReport& p : r.progress) {
    if (p.job == r.job) {
      ProgressLocked(r.worker, p, now);
    }
  }
  if (r.first_output) {
    FirstOutputLocked(r.job, now);
  }
  CountReportLocked(r.worker);
  if (r.held.has_value()) {
    // What the worker holds now replaces what dispatches taught the
    // scheduler (true even when the report itself is stale).
    std::vector<std::string> held;
    for (const std::string& l : *r.held) {
      if (!l.empty() && l.size() <= kMaxHeldLabelBytes && held.size() < kMaxHeldLabels) {
        held.push_back(l);
      }
    }
    (void)scheduler_.SetLearnedLabels(r.worker, held);
  }
  auto j = jobs_.find(r.job);
  if (!bad.ok() && j != jobs_.end()) {
    // StageFailed refuses it if the job moved on meanwhile (a stale report).
    return RefuseOutputLocked(j->second, r, bad, now);
  }
  Status s = j == jobs_.end() ? NotFoundError("unknown job " + std::to_string(r.job))
                              : scheduler_.StageDone(r.job, r.worker, now);
  if (!s.ok()) {
    // A report nobody waits for (the job was cancelled or finished, or the
    // work was given to another worker): its payloads are garbage unless a
    // live job owns the same keys.
    for (const std::string& k : r.payload_keys) {
      payloads_.ReleaseUnlessOwned(k);
    }
    return s;
  }
  JobRecord& rec = j->second;
  const std::optional<std::string> st = rec.view.stage;
  const bool final_stage = *st == rec.request.pipeline.back();
  {
    if (!final_stage) {
      rec.outputs[*st] = std::string(r.output);  // The next stage's input.
    }
    const std::vector<std::string>& keys = r.payload_keys;
    payloads_.Record(r.job, *st, keys);  // A re-run replaces the lost output's keys.
    if (rec.view.finished()) {
      // Cancelled while the stage ran to its end: nobody will read it.
      payloads_.Release(r.job, *st);
    }
    // This stage consumed the previous stage's output: it can go now (not
    // before, so a re-queued stage can read its input again).
    const auto& pipe = rec.request.pipeline;
    auto at = std::find(pipe.begin(), pipe.end(), *st);
    if (at != pipe.begin() && at != pipe.end()) {
      payloads_.Release(r.job, *std::prev(at));
    }
    if (final_stage) {
      if (!rec.view.finished()) {
        StoreResultLocked(rec, r.output);
      }
      rec.view.result_type = r.output_type;
    } else if (!rec.view.finished()) {
      rec.saved = JobProgress{*st, std::string(r.output), keys, 0};
      SaveProgressLocked(rec);
    }
  }
  rec.queued_since = now;
  EventLocked(rec, now, "stage_done");
  rec.view.events.back().timings_ms = CheckedTimings(r);
  rec.view.events.back().counts = CheckedCounts(r);
  ApplyLocked(now);
  return Status::Ok();
}

Status OrchestratorState::RefuseOutputLocked(JobRecord& j, const DoneReport& r, const Status& why,
                                             TimePoint now) {
  const std::string reason =
      "bad output from worker " + std::to_string(r.worker) + ": " + std::string(why.message());
  // Refused before the attempt is re-queued, so the retry never goes back
  // to it.
  if (const int bad = registry_.CountBadOutput(r.worker);
      bad > 0 && bad == options_.max_bad_outputs) {
    SLUICE_LOG(warn, "orchestrator: worker {} returned {} bad outputs; it gets no further work",
               r.worker, bad);
    (void)scheduler_.Draining(r.worker, now);
  }
  SLUICE_RETURN_IF_ERROR(scheduler_.StageFailed(r.job, r.worker, reason, /*retryable=*/true, now));
  for (const std::string& k : r.payload_keys) {
    payloads_.ReleaseUnlessOwned(k);  // Nobody reads a refused output.
  }
  j.queued_since = now;
  EventLocked(j, now, "bad_output", reason);
  const internal::LogFields fields{
      {"job", j.view.name}, {"stage", j.view.stage}, {"worker", std::to_string(r.worker)}};
  SLUICE_LOG(warn, "orchestrator: job {}: {}", j.view.name, reason);
  ApplyLocked(now);
  return InvalidArgumentError("output refused: " + std::string(why.message()));
}

Status OrchestratorState::Failed(const FailedReport& r) {
  const JournalFlush flush(this);  // After the lock is released.
  const TimePoint now = Now();
  MutexLock lock(mu_);
  CountReportLocked(r.worker);
  auto j = jobs_.find(r.job);
  if (j == jobs_.end()) {
    return NotFoundError("unknown job " + std::to_string(r.job));
  }
  if (r.preempted) {
    SLUICE_RETURN_IF_ERROR(scheduler_.Preempted(r.job, r.worker, now));
    EventLocked(j->second, now, "preempted");
  } else {
    // A cached input evicted before it was read: its producer runs again
    // (the failure below then re-queues the producer, not this stage).
    (void)RerunOnEvictedInputLocked(j->second, r, now);
    if (r.code == StatusCode::kInvalidArgument) {
      j->second.view.error_type = "invalid_request_error";  // The client's input.
    }
    const std::string reason(r.reason);
    SLUICE_RETURN_IF_ERROR(scheduler_.StageFailed(r.job, r.worker, reason, r.retryable, now));
    j->second.queued_since = now;
    EventLocked(j->second, now, "stage_failed", reason);
  }
  ApplyLocked(now);
  return Status::Ok();
}

Status OrchestratorState::Cancel(JobId id) {
  const JournalFlush flush(this);  // After the lock is released.
  const TimePoint now = Now();
  MutexLock lock(mu_);
  auto j = jobs_.find(id);
  if (j == jobs_.end() || j->second.view.finished()) {
    return NotFoundError("no running or queued job " + std::to_string(id));
  }
  return CancelLocked(j->second, now);
}

Status OrchestratorState::CancelLocked(JobRecord& j, TimePoint now) {
  SLUICE_RETURN_IF_ERROR(scheduler_.Cancel(j.view.id, now));
  FinishLocked(j, JobStatus::kCancelled, "", now);
  ApplyLocked(now);
  return Status::Ok();
}

void OrchestratorState::FinishLocked(JobRecord& j, JobStatus status, std::string error,
                                     TimePoint now) {
  if (j.view.finished()) {
    return;
  }
  j.view.status = status;
  j.view.error = std::move(error);
  j.outputs.clear();  // Inputs of stages that will not run now.
  j.view.finished_unix_s = UnixNow();
  if (journal_ != nullptr) {
    JobOutcome o;
    o.status = j.view.status;
    o.error = j.view.error;
    o.error_type = j.view.error_type;
    o.result_type = j.view.result_type;
    o.result = j.view.result;
    o.finished_unix_s = j.view.finished_unix_s;
    outbox_->Finish(j.view.id, o);
  }
  if (j.view.status == JobStatus::kSucceeded) {
    ++stats_.succeeded;
    const double latency_s = std::chrono::duration<double>(now - j.submitted).count();
    stats_.job_latency.Add(latency_s, j.view.name);
    autoscaler_.ObserveLatency(j.view.model, latency_s, now);
    if (j.view.ttff_ms < 0) {
      // No first output recorded before the result: an image's first
      // output is its result, and a video's, reported in the same window
      // as its result, arrives after it. Either way the first output was
      // out by now: its latency bounds its TTFF, and every succeeded job
      // counts in the TTFF figures (a late report is then ignored).
      j.view.ttff_ms = latency_s * 1000;
      stats_.ttff.Add(latency_s, j.view.name);
      EventLocked(j, now, "first_output");
    }
    EventLocked(j, now, "done");
  } else if (j.view.status == JobStatus::kFailed) {
    ++stats_.failed;
    EventLocked(j, now, "failed", j.view.error);
  } else {
    ++stats_.cancelled;
    EventLocked(j, now, "cancelled");
  }
  // Whatever the outcome, the job's payloads are no longer needed.
  payloads_.ReleaseJob(j.view.id);
  if (--unfinished_[j.view.tenant] == 0) {
    unfinished_.erase(j.view.tenant);
  }
  finished_order_.push_back(j.view.id);
  while (finished_order_.size() > options_.max_finished_jobs) {
    EraseLocked(finished_order_.front());
    finished_order_.pop_front();
  }
}

void OrchestratorState::ApplyLocked(TimePoint now) {
  for (const Action& a : scheduler_.TakeActions()) {
    auto j = jobs_.find(a.job);
    switch (a.kind) {
      case Action::Kind::kDispatch: {
        if (j == jobs_.end()) {
          break;
        }
        JobRecord& rec = j->second;
        stats_.dispatch_latency[{rec.request.model, a.stage}].Add(
            std::chrono::duration<double>(now - rec.queued_since).count(), rec.view.name);
        rec.view.status = JobStatus::kRunning;
        rec.view.stage = a.stage;
        rec.view.step = a.resume_step;
        EventLocked(rec, now, "stage_started",
                    a.resume_step > 0 ? "resumed from step " + std::to_string(a.resume_step) : "");
        rec.view.events.back().worker = a.worker;
        if (rec.request.affinity.starts_with(kAdapterAffinity)) {
          // The worker loads the job's adapter: later jobs naming it go
          // there while it is free (an affinity, not a constraint).
          (void)scheduler_.LearnLabel(a.worker, rec.request.affinity);
        }
        AssignmentOrder out;
        out.kind = AssignmentOrder::Kind::kRun;
        rec.view.events.back().worker = a.worker;
        out.job = a.job;
        out.job_name = rec.view.name;
        out.priority = rec.request.priority;
        out.stage = rec.view.stage;
        out.model = rec.request.model;
        out.resume_step = static_cast<std::uint32_t>(a.resume_step);
        out.request_json = rec.request.request_json;
        const auto& pipe = rec.request.pipeline;
        auto at = std::find(pipe.begin(), pipe.end(), a.stage);
        if (at != pipe.begin() && at != pipe.end()) {
          auto in = rec.outputs.find(*std::prev(at));
          if (in != rec.outputs.end()) {
            out.input = in->second;
          }
        }
        SendLocked(a.worker, std::move(out));
        break;
      }
      case Action::Kind::kStop:
      case Action::Kind::kCheckpoint: {
        AssignmentOrder out;
        out.kind = a.kind == Action::Kind::kStop ? AssignmentOrder::Kind::kStop
                                                 : AssignmentOrder::Kind::kCheckpoint;
        out.job = a.job;
        out.stage = a.stage;
        if (j != jobs_.end()) {
          out.model = j->second.request.model;
          if (!a.reason.empty()) {  // Taken back: its lease lapsed.
            const internal::LogFields fields{{"job", j->second.view.name},
                                             {"stage", a.stage},
                                             {"worker", std::to_string(a.worker)}};
            SLUICE_LOG(warn, "job {}: {} on worker {}: {}; re-queued", j->second.view.name, a.stage,
                       a.worker, a.reason);
            j->second.queued_since = now;
            EventLocked(j->second, now, "lease_expired", "worker " + std::to_string(a.worker));
          }
        }
        SendLocked(a.worker, std::move(out));
        break;
      }
      case Action::Kind::kJobDone:
        if (j != jobs_.end()) {
          FinishLocked(j->second, JobStatus::kSucceeded, "", now);
        }
        break;
      case Action::Kind::kJobFailed:
        if (j != jobs_.end()) {
          FinishLocked(j->second, JobStatus::kFailed, a.reason, now);
        }
        break;
      case Action::Kind::kReleaseJob:
        if (j != jobs_.end()) {
          payloads_.ReleaseJob(j->first);
        }
        break;
    }
  }
  cv_.NotifyAll();
}

void OrchestratorState::PayloadLost(const std::string& key) {
  const JournalFlush flush(this);  // After the lock is released.
  const TimePoint now = Now();
  MutexLock lock(mu_);
  std::optional<std::pair<JobId, std::string>> owner = payloads_.Owner(key);
  if (!owner.has_value()) {
    return;
  }
  const auto [job, stage] = *owner;
  auto j = jobs_.find(job);
  if (j == jobs_.end() || j->second.view.finished()) {
    payloads_.Disown(key);
    return;
  }
  if (Status s = scheduler_.PayloadLost(job, stage, now); !s.ok()) {
    const internal::LogFields fields{{"job", j->second.view.name}, {"stage", stage}};
    SLUICE_LOG(warn, "job {}: lost payload '{}' not re-run: {}", j->second.view.name, key,
               s.ToString());
    return;
  }
  payloads_.Drop(job, stage);
  // What the journal holds may name the lost output: after a restart the
  // job runs from its first stage.
  j->second.saved = JobProgress{};
  SaveProgressLocked(j->second);
  ++stats_.payloads_lost;
  EventLocked(j->second, now, "payload_lost", stage + " output: " + key);
  ApplyLocked(now);
}

std::vector<std::string> OrchestratorState::TakeReleasedKeys() {
  MutexLock lock(mu_);
  return payloads_.TakeReleased();
}

Status OrchestratorState::Unregister(WorkerId id) {
  const JournalFlush flush(this);  // After the lock is released.
  const TimePoint now = Now();
  MutexLock lock(mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return NotFoundError("no worker " + std::to_string(id));
  }
  SLUICE_LOG(info, "worker {} ({}) unregistered", id, registry_.Find(id)->stage);
  LoseWorkerLocked(it, now, "unregistered");
  ApplyLocked(now);
  return Status::Ok();
}

std::map<WorkerId, OrchestratorState::WorkerRecord>::iterator OrchestratorState::LoseWorkerLocked(
    std::map<WorkerId, WorkerRecord>::iterator it, TimePoint now, const std::string& why) {
  const WorkerId id = it->first;
  const RegisteredWorker& reg = *registry_.Find(id);
  for (JobId job : scheduler_.AssignedTo(id)) {
    if (auto j = jobs_.find(job); j != jobs_.end()) {
      EventLocked(j->second, now, "worker_lost",
                  "worker " + std::to_string(id) + " (" + reg.stage + ") " + why +
                      "; the stage runs again");
    }
  }
  (void)scheduler_.WorkerLost(id, now);
  if (it->second.closed) {
    it->second.closed();
  }
  RetireCachesLocked(it->second, reg.stage);
  instances_.Lost(reg.instance, id);
  registry_.Remove(id);  // `reg` goes with it.
  return workers_.erase(it);
}

void OrchestratorState::Tick() {
  const JournalFlush flush(this);  // After the lock is released.
  const TimePoint now = Now();
  MutexLock lock(mu_);
  for (WorkerId id : registry_.Silent(now)) {
    SLUICE_LOG(warn, "worker {} ({}) missed its heartbeats; re-queueing its work", id,
               registry_.Find(id)->stage);
    if (auto it = workers_.find(id); it != workers_.end()) {
      LoseWorkerLocked(it, now, "missed its heartbeats");
    }
  }
  scheduler_.Tick(now);
  ApplyLocked(now);
  ExpireFinishedLocked(now);
  // The pools' load at every tick (a tenth of a second: a stage of a few
  // hundred milliseconds is seen busy as often as it is); a decision a
  // second.
  autoscaler_.Observe(PoolLoadsLocked(), now);
  if (now >= next_autoscale_) {
    next_autoscale_ = now + std::chrono::seconds(1);
    recommendations_ = autoscaler_.Recommend(now);
  }
}

std::vector<PoolLoad> OrchestratorState::PoolLoadsLocked() {
  std::vector<PoolLoad> out;
  for (const PoolStats& p : scheduler_.PoolsNow()) {
    PoolLoad l;
    l.model = p.model;
    l.stage = p.stage;
    l.workers = static_cast<int>(p.workers);
    l.slots = static_cast<int>(p.slots);
    l.busy_slots = static_cast<double>(p.slots > p.free_slots ? p.slots - p.free_slots : 0);
    l.queued = p.queued;
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<PoolLoad> OrchestratorState::PoolLoads() {
  MutexLock lock(mu_);
  return PoolLoadsLocked();
}

std::vector<PoolRecommendation> OrchestratorState::Recommendations() {
  MutexLock lock(mu_);
  return recommendations_;
}

void OrchestratorState::SetStoreUsage(std::optional<StoreUsage> usage) {
  MutexLock lock(mu_);
  stats_.store_answered = usage.has_value();
  if (usage.has_value()) {
    stats_.store = std::move(usage);
  }
}

ServiceStats OrchestratorState::Stats() {
  MutexLock lock(mu_);
  ServiceStats s = stats_;
  s.scheduler = scheduler_.Stats();
  s.recommendations = recommendations_;
  s.caches = retired_caches_;
  s.transports = retired_transports_;
  for (const auto& [id, w] : workers_) {
    for (const auto& [kind, c] : w.caches) {
      s.caches[kind] += c;
    }
    for (const auto& [transport, b] : w.transports) {
      s.transports[{registry_.Find(id)->stage, transport}] += b;
    }
  }
  return s;
}

}  // namespace sluice::orchestrator
