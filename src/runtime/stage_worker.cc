#include "sluice/runtime/stage_worker.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <list>
#include <map>
#include <optional>
#include <thread>

#include "common/call_mac.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/random.h"
#include "common/rpc_auth.h"
#include "orchestrator/core/model.h"
#include "orchestrator/core/worker_reports.h"
#include "orchestrator/core/worker_session.h"
#include "proto/orchestrator/v1/orchestrator.grpc.pb.h"
#include "runtime/run_state.h"

namespace sluice::internal {

namespace pb = ::sluice::orchestrator::v1;
namespace worker_method = ::sluice::orchestrator::worker_method;

// Proves the call comes from the registration holding `secret`
// (worker_session.h); an orchestrator refuses a worker's call without it.
void ProveSession(grpc::ClientContext& ctx, const std::string& secret, std::string_view method) {
  ctx.AddMetadata(orchestrator::kWorkerMacMetadataKey, SignCall(secret, method, UnixMillis()));
}

class StageWorkerImpl {
 public:
  StageWorkerImpl(StageWorkerConfig c, StageHandler h)
      : config_(std::move(c)), handler_(std::move(h)) {
    while (instance_ == 0) {
      RandomBytes(&instance_, sizeof instance_);
    }
  }

  ~StageWorkerImpl() { Stop(); }

  Status Start() {
    SLUICE_RETURN_IF_ERROR(ParseHostPort(config_.orchestrator, false).status());
    SLUICE_RETURN_IF_ERROR(ValidateModels());
    if (config_.capacity < 1 || config_.capacity > 1024) {
      return InvalidArgumentError("stage worker: capacity must be in 1..1024");
    }
    if (config_.heartbeat_interval.count() <= 0 || !handler_) {
      return InvalidArgumentError("stage worker: needs a handler and a positive heartbeat");
    }
    if (config_.assignment_timeout.count() < 0 ||
        (config_.assignment_timeout.count() > 0 &&
         config_.assignment_timeout <= 2 * config_.heartbeat_interval)) {
      return InvalidArgumentError(
          "stage worker: assignment_timeout must be 0 (the orchestrator's) or more than two "
          "heartbeats");
    }
    {
      MutexLock lock(stub_mu_);
      endpoint_ = config_.orchestrator;
      stub_ = pb::Orchestrator::NewStub(MakeChannel(endpoint_, config_.security));
    }
    reader_ = std::thread([this] { ReadLoop(); });
    beater_ = std::thread([this] { BeatLoop(); });
    return Status::Ok();
  }

  void Drain(std::chrono::milliseconds timeout) {
    std::vector<std::shared_ptr<RunState>> left;
    {
      MutexLock lock(mu_);
      if (!draining_) {
        draining_ = true;
        beat_now_ = true;  // The orchestrator stops assigning at once.
        cv_.NotifyAll();
      }
      cv_.WaitFor(lock, timeout, [&]() SLUICE_REQUIRES(mu_) { return running_.empty(); });
      for (auto& [id, s] : running_) {
        left.push_back(s);
      }
    }
    for (auto& s : left) {
      s->stop = true;
      if (!s->reported.exchange(true)) {
        ReportFailed(*s, UnavailableError("worker draining", FailureScope::kEndpoint), false);
      }
    }
    // A run leaves `running_` just before its report is sent. Wait for the
    // reports in flight (each RPC has a deadline): leaving before the
    // orchestrator heard a Done would make it re-queue finished work.
    MutexLock lock(mu_);
    cv_.Wait(lock, [&]() SLUICE_REQUIRES(mu_) { return reporting_ == 0; });
  }

  void Stop() {
    Drain(std::chrono::milliseconds(0));
    std::uint64_t id;
    std::string secret;
    {
      MutexLock lock(mu_);
      stopping_ = true;
      // A registration in flight may already count here: wait for its
      // answer (the RPC has a deadline), so that it is unregistered too.
      cv_.Wait(lock, [&]() SLUICE_REQUIRES(mu_) { return !registering_; });
      id = worker_id_;
      secret = session_secret_;
    }
    if (id != 0) {
      // Leave at once rather than after the heartbeat timeout (best effort:
      // the orchestrator may be gone).
      pb::UnregisterRequest req;
      req.set_worker_id(id);
      pb::UnregisterResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      ProveSession(ctx, secret, worker_method::kUnregister);
      (void)Stub()->Unregister(&ctx, req, &resp);
    }
    {
      MutexLock lock(mu_);
      if (stream_ctx_ != nullptr) {
        stream_ctx_->TryCancel();
      }
    }
    cv_.NotifyAll();
    if (reader_.joinable()) {
      reader_.join();
    }
    if (beater_.joinable()) {
      beater_.join();
    }
    std::list<Runner> runners;
    {
      MutexLock lock(mu_);
      runners.swap(runners_);
    }
    for (Runner& r : runners) {
      r.thread.join();  // Handlers were told to stop.
    }
  }

  std::uint64_t completed() const { return completed_.load(); }
  std::uint64_t adopted() const { return adopted_.load(); }

  StageWorkerMetrics Metrics() {
    StageWorkerMetrics m;
    {
      MutexLock lock(metrics_mu_);
      m = metrics_;
    }
    m.stage = config_.stage;
    m.capacity = config_.capacity;
    MutexLock lock(mu_);
    m.running = static_cast<int>(running_.size());
    return m;
  }

  bool WaitRegistered(std::chrono::milliseconds timeout) {
    MutexLock lock(mu_);
    return cv_.WaitFor(lock, timeout, [&]() SLUICE_REQUIRES(mu_) {
      return registered_ || stopping_;
    }) && registered_;
  }

 private:
  struct Runner {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  Status ValidateModels() {
    auto bad = [](const char* field, const Status& s) {
      return InvalidArgumentError("stage worker: " + std::string(field) + ": " +
                                  std::string(s.message()));
    };
    if (Status s = orchestrator::ValidateStageName(config_.stage); !s.ok()) {
      return bad("stage", s);
    }
    for (const std::string& m : config_.models) {
      if (Status s = orchestrator::ValidateModelName(m); !s.ok()) {
        return bad("models", s);
      }
    }
    if (config_.models.size() > 64) {
      return InvalidArgumentError("stage worker: models: at most 64");
    }
    if (Status s = orchestrator::ValidateDeclaredSizes(config_.image_size, config_.video_size);
        !s.ok()) {
      return InvalidArgumentError("stage worker: " + std::string(s.message()));
    }
    if (config_.condition_encoder.has_value()) {
      if (Status s = cache::Validate(*config_.condition_encoder); !s.ok()) {
        return bad("condition_encoder", s);
      }
    }
    std::vector<orchestrator::StageDecl> stages = orchestrator::StandardPipeline();
    if (!config_.pipeline.empty()) {
      Result<std::vector<orchestrator::StageDecl>> p =
          orchestrator::ParsePipeline(config_.pipeline);
      Status s = p.ok() ? orchestrator::ValidateModel({"worker", *p}) : p.status();
      if (!s.ok()) {
        return bad("pipeline", s);
      }
      stages = std::move(*p);
      for (const orchestrator::StageDecl& d : stages) {
        pb::StageDecl* out = pipeline_.Add();
        out->set_name(d.name);
        out->set_admission(d.kind == orchestrator::StageKind::kAdmission);
        out->set_progress_weight(static_cast<std::uint32_t>(d.progress_weight));
      }
    }
    if (std::none_of(stages.begin(), stages.end(),
                     [&](const orchestrator::StageDecl& d) { return d.name == config_.stage; })) {
      return InvalidArgumentError("stage worker: stage '" + config_.stage +
                                  "' is not in the pipeline " +
                                  orchestrator::FormatPipeline(stages));
    }
    return Status::Ok();
  }

  bool Register() {
    pb::RegisterRequest req;
    req.set_stage(config_.stage);
    for (const std::string& m : config_.models) {
      req.add_models(m);
    }
    *req.mutable_pipeline() = pipeline_;
    req.set_capacity(static_cast<std::uint32_t>(config_.capacity));
    req.set_assignment_timeout_ms(static_cast<std::uint64_t>(config_.assignment_timeout.count()));
    for (const auto& l : config_.labels) {
      req.add_labels(l);
    }
    req.set_name(config_.name.empty() ? config_.stage : config_.name);
    req.set_image_size(config_.image_size);
    req.set_video_size(config_.video_size);
    req.set_takes_picture(config_.takes_picture);
    req.set_instance(instance_);
    req.set_attempt(++attempts_);
    if (config_.condition_encoder.has_value()) {
      const cache::ConditionEncoder& e = *config_.condition_encoder;
      pb::ConditionEncoder* out = req.mutable_condition_encoder();
      out->set_id(e.id);
      out->set_version(e.version);
      out->set_params_json(cache::ParamsToJson(e.params));
      for (const std::string& f : e.text_fields) {
        out->add_text_fields(f);
      }
    }
    pb::RegisterResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    {
      MutexLock lock(mu_);
      if (stopping_) {
        return false;
      }
      registering_ = true;
    }
    const grpc::Status rpc = Stub()->Register(&ctx, req, &resp);
    if (!rpc.ok()) {
      {
        MutexLock lock(mu_);
        registering_ = false;
      }
      cv_.NotifyAll();
      // The orchestrator refusing this registration (a pipeline that
      // differs from its model's declaration) is retried like an absent
      // orchestrator, and said once per distinct reason.
      const bool away = rpc.error_code() == grpc::StatusCode::UNAVAILABLE ||
                        rpc.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
      if (away) {
        SLUICE_LOG(warn, "stage worker {}: orchestrator {} unreachable ({}); retrying in {} ms",
                   config_.stage, Endpoint(), rpc.error_message(), backoff_.count());
        Reresolve();
      } else if (rpc.error_message() != refused_) {
        refused_ = rpc.error_message();
        SLUICE_LOG(error, "stage worker {}: registration refused: {}", config_.stage, refused_);
      }
      return false;
    }
    refused_.clear();
    backoff_ = kFirstBackoff;
    MutexLock lock(mu_);
    registering_ = false;
    worker_id_ = resp.worker_id();
    session_secret_ = resp.session_secret();
    reports_ = 0;
    cache_base_.clear();  // Counters go from zero for each registration.
    for (const cache::Cache* c : config_.caches) {
      cache_base_.push_back(c->stats());
    }
    transport_base_.clear();
    if (config_.engine != nullptr) {
      for (const TransportStats& t : config_.engine->TransportCounters()) {
        transport_base_[t.name] = t;
      }
    }
    registered_ = true;
    cv_.NotifyAll();
    return true;
  }

  // The caches' counters since this registration began.
  void AppendCachesLocked(pb::HeartbeatRequest& hb) SLUICE_REQUIRES(mu_) {
    for (std::size_t i = 0; i < config_.caches.size() && i < cache_base_.size(); ++i) {
      const cache::CacheStats now = config_.caches[i]->stats();
      const cache::CacheStats& base = cache_base_[i];
      pb::CacheCounters* c = hb.add_caches();
      c->set_kind(config_.caches[i]->options().name);
      c->set_lookups(now.lookups - base.lookups);
      c->set_hits(now.hits - base.hits);
      c->set_misses(now.misses - base.misses);
      c->set_computes(now.computes - base.computes);
      c->set_single_flight_waits(now.single_flight_waits - base.single_flight_waits);
      c->set_takeovers(now.takeovers - base.takeovers);
      c->set_bytes_inserted(now.bytes_inserted - base.bytes_inserted);
    }
  }

  // The engine's bytes per transport since this registration began.
  void AppendTransportsLocked(pb::HeartbeatRequest& hb) SLUICE_REQUIRES(mu_) {
    if (config_.engine == nullptr) {
      return;
    }
    for (const TransportStats& t : config_.engine->TransportCounters()) {
      const TransportStats& base = transport_base_[t.name];
      pb::TransportCounters* c = hb.add_transports();
      c->set_transport(t.name);
      c->set_bytes_read(t.bytes_read - base.bytes_read);
      c->set_bytes_written(t.bytes_written - base.bytes_written);
    }
  }

  bool Stopping() {
    MutexLock lock(mu_);
    return stopping_;
  }

  void ReadLoop() {
    while (!Stopping()) {
      if (!Register()) {
        MutexLock lock(mu_);
        cv_.WaitFor(lock, backoff_, [&]() SLUICE_REQUIRES(mu_) { return stopping_; });
        backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(5000));
        continue;
      }
      pb::AssignmentsRequest req;
      grpc::ClientContext* ctx = nullptr;
      std::string secret;
      {
        MutexLock lock(mu_);
        if (stopping_) {
          return;
        }
        req.set_worker_id(worker_id_);
        secret = session_secret_;
        stream_ctx_ = std::make_unique<grpc::ClientContext>();
        ctx = stream_ctx_.get();  // Replaced only by this thread.
      }
      ProveSession(*ctx, secret, worker_method::kAssignments);
      // The stub (its channel) outlives the stream even if it is replaced.
      const std::shared_ptr<pb::Orchestrator::Stub> stub = Stub();
      auto reader = stub->Assignments(ctx, req);
      pb::Assignment a;
      while (reader->Read(&a)) {
        Handle(a, req.worker_id(), secret);
      }
      (void)reader->Finish();  // The orchestrator restarted or forgot us: register again.
    }
  }

  void Handle(const pb::Assignment& a, std::uint64_t worker_id, const std::string& secret) {
    MutexLock lock(mu_);
    if (a.kind() == pb::Assignment::STOP || a.kind() == pb::Assignment::CHECKPOINT) {
      auto it = running_.find(a.job_id());
      if (it != running_.end()) {
        (a.kind() == pb::Assignment::STOP ? it->second->stop : it->second->checkpoint) = true;
      }
      return;
    }
    const auto run = running_.find(a.job_id());
    if (!draining_ && run != running_.end() && run->second->worker_id != worker_id &&
        run->second->stage == a.stage()) {
      Adopt(*run->second, worker_id, secret);
      return;
    }
    auto s = std::make_shared<RunState>();
    s->beat_now = [this] {
      MutexLock lock(mu_);
      beat_now_ = true;
      cv_.NotifyAll();
    };
    s->job_id = a.job_id();
    s->job_name = a.job_name();
    s->worker_id = worker_id;
    s->session_secret = secret;
    s->stage = a.stage();
    s->model = a.model();
    s->request_json = a.request_json();
    s->input = a.input();
    s->resume_step = static_cast<int>(a.resume_step());
    s->interactive = a.priority() == pb::Assignment::INTERACTIVE;
    if (draining_ || run != running_.end()) {
      // Refused unrun: a draining worker's refusal is not the job's failed
      // attempt (reported as a yield).
      const bool draining = draining_;
      lock.Unlock();
      ReportFailed(*s,
                   UnavailableError(draining ? "worker draining" : "duplicate assignment",
                                    FailureScope::kEndpoint),
                   draining);
      return;
    }
    running_[a.job_id()] = s;
    for (auto it = runners_.begin(); it != runners_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = runners_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    runners_.push_back(Runner{std::thread([this, s, done] {
                                Run(s);
                                *done = true;
                              }),
                              done});
  }

  // `s` still runs under an older registration of this worker, and the
  // orchestrator this worker registered with again assigned its job to the
  // new one (it restarted and restored the job from its journal). The run
  // goes on under the new registration and reports there; nothing is
  // refused (a refusal would be retried at once on this worker, and fail
  // the job after its attempts). The new orchestrator's view holds: stops
  // and checkpoints the old one asked for are dropped, and the first
  // output, if any, is told again.
  void Adopt(RunState& s, std::uint64_t worker_id, const std::string& secret) SLUICE_REQUIRES(mu_) {
    SLUICE_LOG(info, "stage worker {}: job {} still running from registration {} goes on under {}",
               config_.stage, s.job_id, s.worker_id, worker_id);
    s.worker_id = worker_id;
    s.session_secret = secret;
    s.stop = false;
    s.checkpoint = false;
    MutexLock sl(s.mu);
    s.first_sent = false;
    ++adopted_;
  }

  void Run(const std::shared_ptr<RunState>& s) {
    // What this thread logs is about this job (JSON logs carry it).
    const internal::LogFields fields{
        {"job", s->job_name.empty() ? std::to_string(s->job_id) : s->job_name},
        {"stage", s->stage},
        {"worker", std::to_string(s->worker_id)}};
    SLUICE_LOG(debug, "stage worker {}: job {} starts{}", config_.stage, s->job_id,
               s->resume_step > 0 ? " from step " + std::to_string(s->resume_step) : "");
    StageContext ctx(s);
    const auto started = std::chrono::steady_clock::now();
    {
      MutexLock sl(s->mu);
      s->last_step_at = started;
    }
    Result<StageOutput> out = handler_(ctx);
    SLUICE_LOG(debug, "stage worker {}: job {} {}", config_.stage, s->job_id,
               !out.ok()        ? "failed: " + out.status().ToString()
               : out->preempted ? std::string("yields at a checkpoint")
                                : std::string("done"));
    {
      using Ms = std::chrono::duration<double, std::milli>;
      const double run_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      std::uint64_t steps = 0;
      std::vector<double> step_seconds;
      {
        MutexLock sl(s->mu);
        s->timings_ms["start"] = Ms(started - s->received).count();
        s->timings_ms["run"] = run_s * 1000;
        steps = s->steps_reported;
        step_seconds.swap(s->step_seconds);
      }
      MutexLock ml(metrics_mu_);
      metrics_.run.Add(run_s, s->job_name);
      for (double d : step_seconds) {
        metrics_.step.Add(d, s->job_name);
      }
      metrics_.steps += steps;
    }
    // Counted before the report: once the orchestrator has heard of it (and
    // a client may have its result), `completed()` includes it.
    ++completed_;
    if (!s->reported.exchange(true)) {
      if (s->stop && !(out.ok() && !out->preempted)) {
        ReportFailed(*s, Status(StatusCode::kCancelled, "stopped"), false);
      } else if (!out.ok()) {
        ReportFailed(*s, out.status(), false);
      } else if (out->preempted) {
        FlushProgress(*s);  // The checkpointed step it yields at, before the yield.
        ReportFailed(*s, Status(StatusCode::kCancelled, "preempted"), true);
      } else {
        pb::DoneRequest d;
        {
          // The last step and the first output ride on the report, which
          // the orchestrator applies first: one round trip, not two.
          pb::HeartbeatRequest unsent;
          MutexLock sl(s->mu);
          s->AppendProgress(unsent);
          d.mutable_progress()->Swap(unsent.mutable_progress());
          d.set_first_output(unsent.first_output_size() > 0);
          d.mutable_timings_ms()->insert(s->timings_ms.begin(), s->timings_ms.end());
          d.mutable_counts()->insert(s->counts.begin(), s->counts.end());
          if (s->held.has_value()) {
            d.set_reports_held(true);
            for (const std::string& l : *s->held) {
              d.add_held(l);
            }
          }
        }
        const auto [id, secret] = CountReport(*s);
        {
          MutexLock ml(metrics_mu_);
          ++metrics_.done;
        }
        d.set_worker_id(id);
        d.set_job_id(s->job_id);
        d.set_output(std::move(out->output));  // Megabytes for a final stage: not copied.
        d.set_output_type(out->type);
        for (const auto& k : out->payload_keys) {
          d.add_payload_keys(k);
        }
        pb::DoneResponse resp;
        grpc::ClientContext c2;
        c2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        ProveSession(c2, secret, worker_method::kDone);
        const grpc::Status st = Stub()->Done(&c2, d, &resp);
        ReportSent();
        if (!st.ok()) {
          SLUICE_LOG(warn, "stage worker {}: Done for job {} not taken: {}{}", config_.stage,
                     s->job_id, st.error_message(),
                     out->payload_keys.empty() ? "" : "; its payloads are removed");
          if (config_.discard_payloads && !out->payload_keys.empty()) {
            config_.discard_payloads(out->payload_keys);
          }
        }
      }
    }
    MutexLock lock(mu_);
    auto it = running_.find(s->job_id);
    if (it != running_.end() && it->second == s) {
      running_.erase(it);
    }
    cv_.NotifyAll();
  }

  // Sends `s`'s unsent progress and first-output mark in a heartbeat now.
  void FlushProgress(RunState& s) {
    pb::HeartbeatRequest hb;
    std::string secret;
    {
      MutexLock lock(mu_);
      hb.set_worker_id(s.worker_id);
      secret = s.session_secret;
      hb.set_draining(draining_);
      hb.set_free_slots(draining_ ? 0u
                                  : static_cast<std::uint32_t>(std::max<int>(
                                        0, config_.capacity - static_cast<int>(running_.size()))));
      if (s.worker_id == worker_id_) {
        hb.set_reports(reports_);
      }
    }
    int carried = 0;
    {
      MutexLock sl(s.mu);
      carried = s.AppendProgress(hb);
    }
    if (hb.progress_size() == 0 && hb.first_output_size() == 0 && !hb.draining()) {
      return;
    }
    pb::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    ProveSession(ctx, secret, worker_method::kHeartbeat);
    if (Stub()->Heartbeat(&ctx, hb, &resp).ok() && !resp.reregister()) {
      s.Acked(carried);
    }
  }

  // `s` is about to be reported: its slot is free from now on, and later
  // heartbeats say how many reports precede their free-slot count.
  // Returns the registration (id, session secret) to report under: fixed
  // from here on, as `s` leaves running_ and can no longer be adopted.
  // Pair with ReportSent once the report's RPC has returned.
  std::pair<std::uint64_t, std::string> CountReport(const RunState& s) {
    MutexLock lock(mu_);
    ++reporting_;
    if (s.worker_id == worker_id_) {
      ++reports_;
    }
    auto it = running_.find(s.job_id);
    if (it != running_.end() && it->second.get() == &s) {
      running_.erase(it);
    }
    cv_.NotifyAll();
    return {s.worker_id, s.session_secret};
  }

  // Reports `why` with its code and scope (the orchestrator decides on the
  // code: retry elsewhere, fail as the client's error, or fail).
  void ReportFailed(const RunState& s, const Status& why, bool preempted) {
    const auto [id, secret] = CountReport(s);
    {
      MutexLock ml(metrics_mu_);
      if (preempted) {
        ++metrics_.preempted;
      } else {
        ++metrics_.failed[why.code()];
      }
    }
    pb::FailedRequest f;
    f.set_worker_id(id);
    f.set_job_id(s.job_id);
    f.set_reason(std::string(why.message()));
    f.set_retryable(orchestrator::RetryableCode(why.code()));
    f.set_code(static_cast<std::uint32_t>(why.code()));
    f.set_scope(static_cast<std::uint32_t>(why.scope()));
    f.set_preempted(preempted);
    pb::FailedResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ProveSession(ctx, secret, worker_method::kFailed);
    (void)Stub()->Failed(&ctx, f, &resp);
    ReportSent();
  }

  // A report counted by CountReport has reached the orchestrator (or its
  // RPC gave up): Drain may return once none is left in flight.
  void ReportSent() {
    MutexLock lock(mu_);
    --reporting_;
    cv_.NotifyAll();
  }

  void BeatLoop() {
    // Runs whose checkpointed step the beat carries, acknowledged when the
    // orchestrator answers it.
    std::vector<std::pair<std::shared_ptr<RunState>, int>> carried;
    MutexLock lock(mu_);
    while (!stopping_) {
      cv_.WaitFor(lock, config_.heartbeat_interval,
                  [&]() SLUICE_REQUIRES(mu_) { return stopping_ || beat_now_; });
      beat_now_ = false;
      if (stopping_ || worker_id_ == 0) {
        continue;
      }
      pb::HeartbeatRequest hb;
      hb.set_worker_id(worker_id_);
      const std::string secret = session_secret_;
      hb.set_draining(draining_);
      hb.set_free_slots(draining_ ? 0u
                                  : static_cast<std::uint32_t>(std::max<int>(
                                        0, config_.capacity - static_cast<int>(running_.size()))));
      hb.set_reports(reports_);
      AppendCachesLocked(hb);
      AppendTransportsLocked(hb);
      carried.clear();
      for (auto& [id, s] : running_) {
        MutexLock sl(s->mu);
        if (s->worker_id == worker_id_) {
          if (const int step = s->AppendProgress(hb); step > 0) {
            carried.emplace_back(s, step);
          }
        }
      }
      lock.Unlock();
      pb::HeartbeatResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      ProveSession(ctx, secret, worker_method::kHeartbeat);
      const bool ok = Stub()->Heartbeat(&ctx, hb, &resp).ok();
      if (ok && !resp.reregister()) {
        for (auto& [s, step] : carried) {
          s->Acked(step);
        }
      }
      carried.clear();  // Not held past the beat: a run ends on its own.
      lock.Lock();
      if (ok && resp.reregister() && stream_ctx_ != nullptr) {
        stream_ctx_->TryCancel();  // ReadLoop registers again.
      }
    }
  }

  StageWorkerConfig config_;
  StageHandler handler_;
  google::protobuf::RepeatedPtrField<pb::StageDecl> pipeline_;  // Declared; empty: standard.
  std::string refused_;  // The last registration refusal logged (reader thread only).
  static constexpr std::chrono::milliseconds kFirstBackoff{200};
  std::chrono::milliseconds backoff_ = kFirstBackoff;  // Reader thread only.
  bool registered_ SLUICE_GUARDED_BY(mu_) = false;     // Once registered (ever).
  // The orchestrator's stub, replaced when it moved (resolve_orchestrator).
  std::shared_ptr<pb::Orchestrator::Stub> Stub() {
    MutexLock lock(stub_mu_);
    return stub_;
  }
  std::string Endpoint() {
    MutexLock lock(stub_mu_);
    return endpoint_;
  }
  // Asks where the orchestrator is now; a new endpoint gets a new stub.
  void Reresolve() {
    if (!config_.resolve_orchestrator) {
      return;
    }
    const std::string now = config_.resolve_orchestrator();
    MutexLock lock(stub_mu_);
    if (now.empty() || now == endpoint_ || !ParseHostPort(now, false).ok()) {
      return;
    }
    SLUICE_LOG(info, "stage worker {}: the orchestrator moved from {} to {}", config_.stage,
               endpoint_, now);
    endpoint_ = now;
    stub_ = pb::Orchestrator::NewStub(MakeChannel(endpoint_, config_.security));
  }
  Mutex stub_mu_;
  std::string endpoint_ SLUICE_GUARDED_BY(stub_mu_);
  std::shared_ptr<pb::Orchestrator::Stub> stub_ SLUICE_GUARDED_BY(stub_mu_);
  Mutex mu_;
  CondVar cv_;
  std::uint64_t worker_id_ SLUICE_GUARDED_BY(mu_) = 0;
  std::string session_secret_ SLUICE_GUARDED_BY(mu_);  // worker_id_'s registration's.
  std::uint64_t reports_ SLUICE_GUARDED_BY(mu_) = 0;   // Done/Failed sent by this registration.
  // config_.caches' counters when this registration began.
  std::vector<cache::CacheStats> cache_base_ SLUICE_GUARDED_BY(mu_);
  // This worker's registrations: its id for the orchestrator, and attempts.
  std::uint64_t instance_ = 0;
  std::atomic<std::uint64_t> attempts_{0};
  std::map<std::string, TransportStats> transport_base_ SLUICE_GUARDED_BY(mu_);
  int reporting_ SLUICE_GUARDED_BY(mu_) = 0;         // Reports whose RPC has not returned.
  bool registering_ SLUICE_GUARDED_BY(mu_) = false;  // A Register RPC is in flight.
  bool draining_ SLUICE_GUARDED_BY(mu_) = false;
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  bool beat_now_ SLUICE_GUARDED_BY(mu_) = false;  // Send the next heartbeat without waiting.
  std::map<std::uint64_t, std::shared_ptr<RunState>> running_ SLUICE_GUARDED_BY(mu_);
  std::unique_ptr<grpc::ClientContext> stream_ctx_ SLUICE_GUARDED_BY(mu_);
  std::list<Runner> runners_ SLUICE_GUARDED_BY(mu_);
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::uint64_t> adopted_{0};
  Mutex metrics_mu_;  // Taken with no other lock held.
  StageWorkerMetrics metrics_ SLUICE_GUARDED_BY(metrics_mu_);
  std::thread reader_, beater_;
};

}  // namespace sluice::internal

namespace sluice {

StageWorker::StageWorker(std::unique_ptr<internal::StageWorkerImpl> impl)
    : impl_(std::move(impl)) {}
StageWorker::~StageWorker() = default;

Result<std::unique_ptr<StageWorker>> StageWorker::Start(StageWorkerConfig config,
                                                        StageHandler handler) {
  auto impl = std::make_unique<internal::StageWorkerImpl>(std::move(config), std::move(handler));
  SLUICE_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<StageWorker>(new StageWorker(std::move(impl)));
}

void StageWorker::Drain(std::chrono::milliseconds timeout) {
  impl_->Drain(timeout);
}
std::uint64_t StageWorker::completed() const {
  return impl_->completed();
}

std::uint64_t StageWorker::adopted() const {
  return impl_->adopted();
}
StageWorkerMetrics StageWorker::Metrics() const {
  return impl_->Metrics();
}
void StageWorkerMetrics::Seconds::Add(double seconds, std::string_view job) {
  const auto at = static_cast<std::size_t>(
      std::lower_bound(kBounds.begin(), kBounds.end(), seconds) - kBounds.begin());
  if (at < kBounds.size()) {
    ++counts[at];
  }
  ++count;
  sum += seconds;
  if (!job.empty()) {
    exemplars[at].job.assign(job);  // Reuses the string's storage once grown.
    exemplars[at].seconds = seconds;
  }
}
bool StageWorker::WaitRegistered(std::chrono::milliseconds timeout) {
  return impl_->WaitRegistered(timeout);
}

}  // namespace sluice
