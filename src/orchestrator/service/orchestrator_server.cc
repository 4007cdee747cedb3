// gRPC and HTTP faces of OrchestratorState, plus the ticker that declares
// silent workers lost.
#include <grpcpp/grpcpp.h>

#include <deque>
#include <thread>

#include "sluice/orchestrator/server.h"
#include "sluice/store/client.h"
#include "sluice/transfer/engine.h"

#include "common/log.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/protobuf_log.h"
#include "common/rpc_auth.h"
#include "common/rpc_status.h"
#include "discovery/etcd_client.h"
#include "http/server.h"
#include "orchestrator/core/worker_session.h"
#include "orchestrator/service/etcd_journal.h"
#include "orchestrator/service/http_api.h"
#include "orchestrator/service/journal.h"
#include "orchestrator/service/orchestrator_state.h"
#include "orchestrator/service/video_mux.h"
#include "orchestrator/service/worker_messages.h"
#include "proto/orchestrator/v1/orchestrator.grpc.pb.h"

namespace sluice::internal {

namespace pb = ::sluice::orchestrator::v1;
using orchestrator::kWorkerMacMetadataKey;
using orchestrator::OrchestratorState;
namespace worker_method = orchestrator::worker_method;

namespace {

// One worker's assignment stream: queued and written one at a time. Every
// path that ends the stream goes through FinishLocked, which calls Finish
// exactly once (gRPC asserts on a second call: a worker unregistering, then
// cancelling its stream, used to take the orchestrator down).
class AssignmentWriter final : public grpc::ServerWriteReactor<pb::Assignment> {
 public:
  AssignmentWriter(OrchestratorState* state, std::uint64_t worker)
      : state_(state), worker_(worker) {}

  void Push(const pb::Assignment& a) {
    MutexLock lock(mu_);
    if (closing_) {
      return;
    }
    queue_.push_back(a);
    if (!writing_) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }
  // The worker was declared lost or replaced by a newer stream: ends the
  // stream once the write in flight (if any) is done.
  void Close() {
    MutexLock lock(mu_);
    closing_ = true;
    if (!writing_) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker declared lost"));
    }
  }
  void OnWriteDone(bool ok) override {
    MutexLock lock(mu_);
    queue_.pop_front();
    writing_ = false;
    if (!ok) {
      closing_ = true;
      FinishLocked(grpc::Status::OK);  // The client is gone; nobody reads it.
      return;
    }
    if (closing_) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker declared lost"));
      return;
    }
    if (!queue_.empty()) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }
  void OnCancel() override {
    MutexLock lock(mu_);
    closing_ = true;
    FinishLocked(grpc::Status::CANCELLED);
  }
  // Ends a stream never attached (a refused call, or Attach failed): its
  // worker id is the caller's claim, so OnDone must not detach anything.
  void Refuse(const grpc::Status& s) {
    MutexLock lock(mu_);
    attached_ = false;
    closing_ = true;
    FinishLocked(s);
  }
  void OnDone() override {
    bool attached;
    {
      MutexLock lock(mu_);
      attached = attached_;
    }
    if (attached) {
      state_->Detach(worker_, this);
    }
    delete this;
  }

 private:
  void FinishLocked(const grpc::Status& s) SLUICE_REQUIRES(mu_) {
    if (!finish_called_) {
      finish_called_ = true;
      Finish(s);
    }
  }

  OrchestratorState* state_;
  std::uint64_t worker_;
  Mutex mu_;
  bool attached_ SLUICE_GUARDED_BY(mu_) = true;
  std::deque<pb::Assignment> queue_
      SLUICE_GUARDED_BY(mu_);  // Front is being written when writing_.
  bool writing_ SLUICE_GUARDED_BY(mu_) = false;
  bool closing_ SLUICE_GUARDED_BY(mu_) = false;        // No more writes start.
  bool finish_called_ SLUICE_GUARDED_BY(mu_) = false;  // Finish ran (once).
};

}  // namespace

namespace {

// What each role credential may call: the worker service is a worker's.
RoleMethods WorkerRoles() {
  std::set<std::string, std::less<>> worker;
  for (const char* n : {"Register", "Heartbeat", "Assignments", "Done", "Failed", "Unregister"}) {
    worker.insert("/" + std::string(pb::Orchestrator::service_full_name()) + "/" + n);
  }
  return {{"worker", std::move(worker)}};
}

}  // namespace

class OrchestratorServerImpl final : public pb::Orchestrator::CallbackService {
 public:
  OrchestratorServerImpl(const OrchestratorConfig& c, std::unique_ptr<discovery::EtcdClient> etcd,
                         std::unique_ptr<orchestrator::JobJournal> journal,
                         std::unique_ptr<orchestrator::ResultDir> results)
      : config_(c),
        auth_(c.security, "orchestrator", WorkerRoles()),
        etcd_(std::move(etcd)),
        journal_(std::move(journal)),
        results_(std::move(results)),
        state_(
            [&] {
              orchestrator::ServiceOptions o;
              o.scheduler.max_queued_jobs = c.max_queued_jobs;
              o.scheduler.max_attempts = c.max_attempts;
              o.scheduler.retry_backoff = c.retry_backoff;
              o.scheduler.assignment_timeout = c.assignment_timeout;
              o.scheduler.admission_overcommit = c.admission_overcommit;
              o.heartbeat_interval = c.heartbeat_interval;
              o.worker_timeout = c.worker_timeout;
              if (c.colocated) {
                o.pipeline = std::vector<std::string>{"denoise"};
              }
              for (const auto& [name, pipeline] : c.models) {
                // Start() checked every entry.
                o.models.push_back({name, *orchestrator::ParsePipeline(pipeline)});
              }
              o.default_model = c.default_model;
              o.max_finished_jobs = c.max_finished_jobs;
              o.result_ttl = c.result_ttl;
              o.checkpoint_retention = c.checkpoint_retention;
              o.autoscale = c.autoscale;
              o.check_outputs = c.check_outputs;
              o.max_bad_outputs = c.max_bad_outputs;
              o.shared_condition_cache = c.shared_condition_cache;
              o.tenants = c.access.tenants;
              if (!c.store_master.empty()) {
                // Set before serving (Start); a lookup that fails is a miss.
                o.cache_exists = [this](const std::string& key) -> Result<bool> {
                  return cache_store_ == nullptr ? Result<bool>(false) : cache_store_->Exists(key);
                };
              }
              return o;
            }(),
            journal_.get(), results_.get()) {}

  ~OrchestratorServerImpl() override {
    {
      MutexLock lock(tick_mu_);
      stopping_ = true;
    }
    tick_cv_.NotifyAll();
    if (ticker_.joinable()) {
      ticker_.join();
    }
    if (releaser_.joinable()) {
      releaser_.join();
    }
    store_.reset();  // Its event thread calls into state_: gone before it.
    cache_store_.reset();
    http_.reset();
    adapter_store_.reset();  // After the HTTP face: its routes register adapters.
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now());
    }
  }

  // The adapter registry, with a store client of its own that moves bytes
  // (an engine on the gRPC face's host): registered files go to the store,
  // where workers read them.
  Status StartAdapters() {
    if (!config_.adapters.check) {
      return Status::Ok();
    }
    if (!config_.store_master.empty()) {
      SLUICE_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(config_.listen, true));
      EngineConfig ec;
      ec.listen = HostPort{hp.host, 0}.ToString();
      ec.advertise = config_.adapters.advertise;
      ec.io_threads = 1;
      ec.secret = TransferSecret(config_.security);
      Result<std::unique_ptr<TransferEngine>> engine = TransferEngine::Create(ec);
      if (!engine.ok()) {
        if (!config_.adapters.dir.empty()) {
          return engine.status().WithContext("adapters");
        }
        // The rest of the orchestrator works without adapters.
        SLUICE_LOG(warn, "orchestrator: no adapters served: {}", engine.status().ToString());
        adapters_ = std::make_shared<orchestrator::AdapterRegistry>(config_.adapters, nullptr);
        return Status::Ok();
      }
      adapter_engine_ = std::move(*engine);
      StoreClientConfig sc;
      sc.master = config_.store_master;
      sc.resolve_master = config_.resolve_store_master;
      sc.security = config_.security;
      sc.transfer_timeout = std::chrono::seconds(10);
      SLUICE_ASSIGN_OR_RETURN(adapter_store_, StoreClient::Create(adapter_engine_.get(), sc));
    }
    adapters_ =
        std::make_shared<orchestrator::AdapterRegistry>(config_.adapters, adapter_store_.get());
    return adapters_->LoadDir();
  }

  Status Start() {
    if (!config_.store_master.empty()) {
      // The master alone, through the store's public client: the
      // orchestrator watches and removes payloads, never moves their bytes.
      // Calls give up after 5 s of an unreachable master (a removal is
      // best effort; an unknown payload counts as not held).
      StoreClientConfig sc;
      sc.master = config_.store_master;
      sc.resolve_master = config_.resolve_store_master;
      sc.security = config_.security;
      sc.rpc_timeout = std::chrono::seconds(2);
      sc.master_retry = std::chrono::seconds(5);
      SLUICE_ASSIGN_OR_RETURN(store_, StoreClient::CreateMetadataOnly(sc));
      // Cache lookups at submission answer fast or count as misses: a
      // job never waits on an unreachable master to be accepted.
      sc.rpc_timeout = std::chrono::milliseconds(500);
      sc.master_retry = std::chrono::milliseconds(0);
      SLUICE_ASSIGN_OR_RETURN(cache_store_, StoreClient::CreateMetadataOnly(sc));
    }
    SLUICE_RETURN_IF_ERROR(StartAdapters());
    SLUICE_RETURN_IF_ERROR(state_.Restore(
        store_ == nullptr ? orchestrator::OrchestratorState::PayloadsExist()
                          : [this](const std::vector<std::string>& keys) { return Exist(keys); }));
    SLUICE_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(config_.listen, true));
    SLUICE_ASSIGN_OR_RETURN(HostPort hh, ParseHostPort(config_.http_listen, true));
    grpc::ServerBuilder builder;
    // A second orchestrator on the same port must fail, not split traffic.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    int port = 0;
    builder.AddListeningPort(hp.ToString(), auth_.ServerCredentials(config_.security), &port);
    builder.RegisterService(this);
    // Done carries the final stage's result (an image, a video's frames).
    builder.SetMaxReceiveMessageSize(256 << 20);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port == 0) {
      return UnavailableError("orchestrator cannot listen on " + hp.ToString(),
                              FailureScope::kTransport);
    }
    hp.port = static_cast<std::uint16_t>(port);
    endpoint_ = hp.ToString();
    orchestrator::HttpOptions ho;
    ho.sync_timeout = config_.sync_timeout;
    ho.ffmpeg = config_.ffmpeg == "auto" ? orchestrator::FindFfmpeg() : config_.ffmpeg;
    ho.max_json_depth = config_.http.max_json_depth;
    ho.keep_abandoned_jobs = config_.http.keep_abandoned_jobs;
    ho.limits = config_.limits;
    ho.access = config_.access;
    ho.adapters = adapters_;
    http::Router router;
    orchestrator::InstallHttpApi(router, state_, ho);
    http::ServerOptions so;
    so.listen = hh.ToString();
    so.io_threads = config_.http.threads;
    so.max_header_bytes = config_.http.max_header_bytes;
    so.max_body_bytes = config_.http.max_body_bytes;
    so.max_connections = config_.http.max_connections;
    so.request_timeout = config_.http.request_timeout;
    so.idle_timeout = config_.http.idle_timeout;
    so.stream_keepalive = config_.http.sse_keepalive;
    so.cors_origins = config_.http.cors_origins;
    so.tls_cert_pem = config_.http.tls_cert_pem;
    so.tls_key_pem = config_.http.tls_key_pem;
    Result<std::unique_ptr<http::Server>> http = http::Server::Start(so, std::move(router));
    if (!http.ok()) {
      return http.status().WithContext("orchestrator");
    }
    http_ = std::move(*http);
    http_endpoint_ = http_->endpoint();
    if (store_ != nullptr) {
      // LOST payloads re-run their producer (the client reconnects while
      // the master is away; events in that window are missed).
      store_->Subscribe([this](const StoreEvent& e) {
        if (e.kind == StoreEventKind::kLost) {
          state_.PayloadLost(e.key);
          if (adapters_ != nullptr) {
            adapters_->Lost(e.key);  // An adapter's file goes back in.
          }
        }
      });
      releaser_ = std::thread([this] { ReleaseLoop(); });
    }
    ticker_ = std::thread([this] { TickLoop(); });
    SLUICE_LOG(info, "orchestrator: workers on {}, HTTP on {}", endpoint_, http_endpoint_);
    return Status::Ok();
  }

  const std::string& endpoint() const { return endpoint_; }
  const std::string& http_endpoint() const { return http_endpoint_; }
  OrchestratorState& state() { return state_; }

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const pb::RegisterRequest* req,
                                     pb::RegisterResponse* resp) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    OrchestratorState::Registration r;
    r.models.assign(req->models().begin(), req->models().end());
    r.stage = req->stage();
    r.capacity = static_cast<int>(std::min<std::uint32_t>(req->capacity(), 1u << 20));
    r.labels.assign(req->labels().begin(), req->labels().end());
    r.instance = req->instance();
    r.attempt = req->attempt();
    r.image_size = req->image_size();
    r.video_size = req->video_size();
    r.takes_picture = req->takes_picture();
    // At most a day: a lease is a liveness bound, not a way to pin work.
    r.assignment_timeout = std::chrono::milliseconds(
        std::min<std::uint64_t>(req->assignment_timeout_ms(), 24ull * 3600 * 1000));
    for (const pb::StageDecl& d : req->pipeline()) {
      // Capped one past the limit, so ValidateModel refuses it by name.
      const int weight = static_cast<int>(
          std::min<std::uint32_t>(d.progress_weight(), orchestrator::kMaxProgressWeight + 1));
      r.pipeline.push_back(
          {d.name(),
           d.admission() ? orchestrator::StageKind::kAdmission : orchestrator::StageKind::kWork,
           weight});
    }
    if (req->has_condition_encoder()) {
      const pb::ConditionEncoder& e = req->condition_encoder();
      Result<std::vector<cache::Field>> params = e.params_json().empty()
                                                     ? std::vector<cache::Field>{}
                                                     : cache::ParamsFromJson(e.params_json());
      if (!params.ok()) {
        return Done(ctx, params.status().WithContext("condition_encoder"));
      }
      r.condition_encoder =
          cache::ConditionEncoder{e.id(),
                                  e.version(),
                                  std::move(*params),
                                  {e.text_fields().begin(), e.text_fields().end()}};
    }
    std::string models;
    for (const std::string& m : r.models) {
      models += (models.empty() ? "" : ",") + m;
    }
    std::string secret;
    Result<std::uint64_t> id = state_.Register(std::move(r), &secret);
    if (id.ok()) {
      resp->set_worker_id(*id);
      resp->set_session_secret(std::move(secret));
      resp->set_heartbeat_interval_ms(
          static_cast<std::uint64_t>(config_.heartbeat_interval.count()));
      SLUICE_LOG(info, "worker {} ({} of {}, capacity {}) registered as {}", req->name(),
                 req->stage(), models.empty() ? state_.default_model() : models, req->capacity(),
                 *id);
    }
    return Done(ctx, id.status());
  }
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const pb::HeartbeatRequest* req,
                                      pb::HeartbeatResponse* resp) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    Status s = Prove(*ctx, req->worker_id(), worker_method::kHeartbeat);
    if (s.ok()) {
      s = state_.Heartbeat(orchestrator::FromWire(*req));
    }
    if (s.code() == StatusCode::kNotFound) {
      resp->set_reregister(true);
      s = Status::Ok();
    }
    return Done(ctx, s);
  }
  grpc::ServerWriteReactor<pb::Assignment>* Assignments(
      grpc::CallbackServerContext* ctx, const pb::AssignmentsRequest* req) override {
    auto* w = new AssignmentWriter(&state_, req->worker_id());
    if (grpc::Status refused = auth_.Check(*ctx); !refused.ok()) {
      w->Refuse(refused);
      return w;
    }
    if (Status proof = Prove(*ctx, req->worker_id(), worker_method::kAssignments); !proof.ok()) {
      w->Refuse(ToGrpc(proof));
      return w;
    }
    Status s = state_.Attach(
        req->worker_id(), w,
        [w](const orchestrator::AssignmentOrder& a) { w->Push(orchestrator::ToWire(a)); },
        [w] { w->Close(); });
    if (!s.ok()) {
      w->Refuse(ToGrpc(s));
    }
    return w;
  }
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const pb::DoneRequest* req,
                                 pb::DoneResponse*) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    Status proof = Prove(*ctx, req->worker_id(), worker_method::kDone);
    return Done(ctx, proof.ok() ? state_.Done(orchestrator::FromWire(*req)) : proof);
  }
  grpc::ServerUnaryReactor* Failed(grpc::CallbackServerContext* ctx, const pb::FailedRequest* req,
                                   pb::FailedResponse*) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    Status proof = Prove(*ctx, req->worker_id(), worker_method::kFailed);
    return Done(ctx, proof.ok() ? state_.Failed(orchestrator::FromWire(*req)) : proof);
  }
  grpc::ServerUnaryReactor* Unregister(grpc::CallbackServerContext* ctx,
                                       const pb::UnregisterRequest* req,
                                       pb::UnregisterResponse*) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    Status proof = Prove(*ctx, req->worker_id(), worker_method::kUnregister);
    return Done(ctx, proof.ok() ? state_.Unregister(req->worker_id()) : proof);
  }

 private:
  // Whether the call proves it comes from worker `id`'s registration
  // (worker_session.h); OrchestratorState::ProveWorker's errors.
  Status Prove(const grpc::CallbackServerContext& ctx, std::uint64_t id, std::string_view method) {
    const auto& md = ctx.client_metadata();
    const auto it = md.find(kWorkerMacMetadataKey);
    const std::string_view proof = it == md.end()
                                       ? std::string_view()
                                       : std::string_view(it->second.data(), it->second.size());
    return state_.ProveWorker(id, method, proof);
  }

  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const Status& s) {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(ToGrpc(s));
    return r;
  }

  void TickLoop() {
    MutexLock lock(tick_mu_);
    while (!stopping_) {
      tick_cv_.WaitFor(lock, std::chrono::milliseconds(100));
      lock.Unlock();
      state_.Tick();
      lock.Lock();
    }
  }

  // Whether the store holds every key complete now (Start, before
  // serving). Once the master has not answered, every later key counts as
  // not held at once: a restore does not wait 5 s per key.
  bool Exist(const std::vector<std::string>& keys) {
    for (const std::string& key : keys) {
      if (store_unreachable_) {
        return false;
      }
      Result<bool> held = store_->Exists(key);
      if (!held.ok()) {
        store_unreachable_ = held.status().code() == StatusCode::kUnavailable ||
                             held.status().code() == StatusCode::kDeadlineExceeded;
        return false;
      }
      if (!*held) {
        return false;
      }
    }
    return true;
  }

  // Removes released payloads on its own thread, so a slow or absent
  // master never holds back the scheduler's ticks. Best effort: a key
  // already consumed or gone answers kNotFound.
  // Also asks the master what the store holds once a second (the
  // console's store view).
  void ReleaseLoop() {
    MutexLock lock(tick_mu_);
    auto next_usage = std::chrono::steady_clock::now();
    while (!stopping_) {
      tick_cv_.WaitFor(lock, std::chrono::milliseconds(100));
      lock.Unlock();
      if (std::chrono::steady_clock::now() >= next_usage) {
        Result<StoreUsage> usage = cache_store_->Usage();
        state_.SetStoreUsage(usage.ok() ? std::optional<StoreUsage>(std::move(*usage))
                                        : std::nullopt);
        next_usage = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      }
      for (const std::string& key : state_.TakeReleasedKeys()) {
        const Status s = store_->Remove(key);
        if (!s.ok() && s.code() != StatusCode::kNotFound) {
          SLUICE_LOG(warn, "store: removing released payload '{}' failed: {}", key, s.ToString());
        }
      }
      lock.Lock();
    }
  }

  OrchestratorConfig config_;
  CallAuthenticator auth_;
  std::unique_ptr<discovery::EtcdClient> etcd_;        // The journal's, when in etcd.
  std::unique_ptr<orchestrator::JobJournal> journal_;  // Before state_: outlives it.
  std::unique_ptr<orchestrator::ResultDir> results_;   // Likewise.
  OrchestratorState state_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<http::Server> http_;
  std::string endpoint_;
  std::string http_endpoint_;
  Mutex tick_mu_;
  CondVar tick_cv_;
  bool stopping_ SLUICE_GUARDED_BY(tick_mu_) = false;
  std::thread ticker_;
  std::unique_ptr<TransferEngine> adapter_engine_;  // Adapters' files to the store.
  std::unique_ptr<StoreClient> adapter_store_;
  std::shared_ptr<orchestrator::AdapterRegistry> adapters_;
  std::unique_ptr<StoreClient> store_;        // The master alone (CreateMetadataOnly).
  std::unique_ptr<StoreClient> cache_store_;  // The same, failing fast: cache lookups.
  bool store_unreachable_ = false;            // Exist() met a master that did not answer.
  std::thread releaser_;
};

}  // namespace sluice::internal

namespace sluice {

OrchestratorServer::OrchestratorServer(std::unique_ptr<internal::OrchestratorServerImpl> impl)
    : impl_(std::move(impl)) {}
OrchestratorServer::~OrchestratorServer() = default;

Result<std::unique_ptr<OrchestratorServer>> OrchestratorServer::Start(
    const OrchestratorConfig& config) {
  internal::RouteProtobufLogs();  // Peers' malformed messages must not flood the log.
  if (config.assignment_timeout < std::chrono::milliseconds(100) ||
      config.assignment_timeout > std::chrono::hours(24)) {
    return InvalidArgumentError("orchestrator: assignment_timeout must be in 100 ms..24 h");
  }
  if (config.max_queued_jobs < 1) {
    return InvalidArgumentError("orchestrator: max_queued_jobs must be at least 1");
  }
  if (!(config.admission_overcommit >= 0 && config.admission_overcommit <= 10000)) {
    return InvalidArgumentError("orchestrator: admission_overcommit must be in 0..10000");
  }
  if (config.heartbeat_interval.count() <= 0 ||
      config.worker_timeout <= config.heartbeat_interval) {
    return InvalidArgumentError("orchestrator: worker_timeout must exceed heartbeat_interval > 0");
  }
  if (config.max_attempts < 1 || config.max_attempts > 100) {
    return InvalidArgumentError("orchestrator: max_attempts must be in 1..100");
  }
  if (config.retry_backoff.count() < 0 || config.retry_backoff > orchestrator::kMaxRetryBackoff) {
    return InvalidArgumentError("orchestrator: retry_backoff must be in 0..30 s");
  }
  if (config.checkpoint_retention.count() < 1 ||
      config.checkpoint_retention > std::chrono::hours(24 * 30)) {
    return InvalidArgumentError("orchestrator: checkpoint_retention must be 1 s .. 30 days");
  }
  SLUICE_RETURN_IF_ERROR(orchestrator::ValidateAutoscaleOptions(config.autoscale));
  if (config.max_finished_jobs < 1 || config.result_ttl.count() < 1) {
    return InvalidArgumentError(
        "orchestrator: max_finished_jobs and result_ttl must be at least 1");
  }
  if (config.max_bad_outputs < 1) {
    return InvalidArgumentError("orchestrator: max_bad_outputs must be at least 1");
  }
  if (config.http.max_json_depth < 2 || config.http.max_json_depth > 1000) {
    return InvalidArgumentError("orchestrator: http.max_json_depth must be in 2..1000");
  }
  const RequestLimits& l = config.limits;
  if (l.max_steps < 1 || l.max_images < 1 || l.max_frames < 1 || l.max_pixel_frames < 1) {
    return InvalidArgumentError("orchestrator: request limits must be at least 1");
  }
  if (config.sync_timeout.count() <= 0) {
    return InvalidArgumentError("orchestrator: sync_timeout must be positive");
  }
  for (const auto& [name, pipeline] : config.models) {
    Result<std::vector<orchestrator::StageDecl>> p = orchestrator::ParsePipeline(pipeline);
    Status s = p.ok() ? orchestrator::ValidateModel({name, *p}) : p.status();
    if (!s.ok()) {
      return InvalidArgumentError("orchestrator: models: '" + name +
                                  "': " + std::string(s.message()));
    }
  }
  if (Status s = orchestrator::ValidateModelName(config.default_model); !s.ok()) {
    return InvalidArgumentError("orchestrator: default_model: " + std::string(s.message()));
  }
  std::unique_ptr<discovery::EtcdClient> etcd;
  std::unique_ptr<orchestrator::JobJournal> journal;
  std::unique_ptr<orchestrator::ResultDir> results;
  const OrchestratorConfig::EtcdJournalConfig& je = config.journal_etcd;
  if (!je.endpoints.empty() && !config.journal_path.empty()) {
    return InvalidArgumentError(
        "orchestrator: journal_path and journal_etcd: the journal is in one place");
  }
  if (!config.journal_path.empty()) {
    SLUICE_ASSIGN_OR_RETURN(journal, orchestrator::Journal::Open(config.journal_path));
    const std::string dir =
        config.result_dir.empty() ? config.journal_path + ".results" : config.result_dir;
    SLUICE_ASSIGN_OR_RETURN(results, orchestrator::ResultDir::Open(dir));
  } else if (!je.endpoints.empty()) {
    Result<std::vector<std::string>> urls = discovery::ParseEtcdEndpoints(je.endpoints);
    if (!urls.ok()) {
      return urls.status().WithContext("orchestrator: journal_etcd");
    }
    SLUICE_ASSIGN_OR_RETURN(etcd,
                            discovery::EtcdClient::Create(
                                *urls, std::chrono::milliseconds(2000),
                                {je.ca_file, je.cert_file, je.key_file, je.user, je.password}));
    SLUICE_ASSIGN_OR_RETURN(
        journal, orchestrator::EtcdJournal::Open(
                     etcd.get(), {je.prefix, je.leader_key, je.leader_lease, je.max_result_bytes}));
    if (!config.result_dir.empty()) {
      SLUICE_ASSIGN_OR_RETURN(results, orchestrator::ResultDir::Open(config.result_dir));
    }
  } else if (!config.result_dir.empty()) {
    return InvalidArgumentError(
        "orchestrator: result_dir needs a journal (the journal names the results it holds)");
  }
  auto impl = std::make_unique<internal::OrchestratorServerImpl>(
      config, std::move(etcd), std::move(journal), std::move(results));
  SLUICE_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<OrchestratorServer>(new OrchestratorServer(std::move(impl)));
}

const std::string& OrchestratorServer::endpoint() const {
  return impl_->endpoint();
}
const std::string& OrchestratorServer::http_endpoint() const {
  return impl_->http_endpoint();
}

std::vector<PoolLoad> OrchestratorServer::PoolLoads() const {
  return impl_->state().PoolLoads();
}

std::vector<PoolRecommendation> OrchestratorServer::Recommendations() const {
  return impl_->state().Recommendations();
}

}  // namespace sluice
