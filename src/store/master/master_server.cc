// The master's faces: the gRPC service, the fast lane (both thin shells
// over MasterCore) and the Prometheus endpoint.

#include <deque>
#include <functional>
#include <set>

#include "sluice/store/master.h"

#include "common/log.h"
#include "common/metrics_endpoint.h"
#include "common/metrics_text.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/protobuf_log.h"
#include "common/random.h"
#include "common/rpc_auth.h"
#include "common/rpc_status.h"
#include "proto/store/v1/master.grpc.pb.h"
#include "store/fastlane/server.h"
#include "store/master/master_core.h"

namespace sluice::internal {

namespace pb = ::sluice::store::v1;

// One WatchEvents stream: events queue up here and are written one at a
// time. Lives until gRPC calls OnDone.
class EventWatcher final : public grpc::ServerWriteReactor<pb::ObjectEvent> {
 public:
  using OnGone = std::function<void(EventWatcher*)>;
  explicit EventWatcher(OnGone on_gone) : on_gone_(std::move(on_gone)) {}

  void Push(const ObjectEvent& e) {
    MutexLock lock(mu_);
    if (finished_ || queue_.size() >= 65536) {
      return;  // A watcher that cannot keep up loses events (at most once).
    }
    pb::ObjectEvent p;
    p.set_kind(static_cast<pb::ObjectEvent::Kind>(e.kind));
    p.set_key(e.key);
    queue_.push_back(std::move(p));
    if (!writing_) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }
  void OnWriteDone(bool ok) override {
    MutexLock lock(mu_);
    queue_.pop_front();
    writing_ = false;
    if (!ok) {
      if (!finished_) {
        finished_ = true;
        Finish(grpc::Status::OK);
      }
      return;
    }
    if (!queue_.empty() && !finished_) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }
  void OnCancel() override { Refuse(grpc::Status::CANCELLED); }
  // Ends the stream with `s` (once).
  void Refuse(const grpc::Status& s) {
    MutexLock lock(mu_);
    if (!finished_) {
      finished_ = true;
      Finish(s);
    }
  }
  void OnDone() override {
    on_gone_(this);
    delete this;
  }

 private:
  OnGone on_gone_;
  Mutex mu_;
  std::deque<pb::ObjectEvent> queue_
      SLUICE_GUARDED_BY(mu_);  // Front is being written when writing_.
  bool writing_ SLUICE_GUARDED_BY(mu_) = false;
  bool finished_ SLUICE_GUARDED_BY(mu_) = false;
};

namespace {

// What each role credential may call: a node registers and heartbeats; a
// worker or client stores and reads objects.
RoleMethods MasterRoles() {
  const auto methods = [](std::initializer_list<const char*> names) {
    std::set<std::string, std::less<>> out;
    for (const char* n : names) {
      out.insert("/" + std::string(pb::Master::service_full_name()) + "/" + n);
    }
    return out;
  };
  const auto store =
      methods({"Describe", "PutStart", "PutEnd", "PutRevoke", "PutReserved", "Unreserve",
               "GetStart", "GetEnd", "RenewRead", "Remove", "Exists", "WaitFor", "WatchEvents"});
  return {{"node", methods({"RegisterNode", "Heartbeat"})}, {"worker", store}, {"client", store}};
}

}  // namespace

class MasterServerImpl final : public pb::Master::CallbackService {
 public:
  explicit MasterServerImpl(const MasterConfig& c)
      : auth_(c.security, "store master", MasterRoles()),
        core_(ToOptions(c), [this](const std::vector<ObjectEvent>& events) { Publish(events); }) {}

  static MasterOptions ToOptions(const MasterConfig& c) {
    MasterOptions o;
    o.heartbeat_interval = c.heartbeat_interval;
    o.node_timeout = c.node_timeout;
    o.put_timeout = c.put_timeout;
    o.read_lease_timeout = c.read_lease_timeout;
    o.high_watermark = c.high_watermark;
    o.low_watermark = c.low_watermark;
    o.reservation_timeout = c.reservation_ttl;
    o.cache_budgets = c.cache_budgets;
    o.soft_pin_reads = c.soft_pin_reads;
    o.durable_commits = c.durable_commits;
    // Reservation ids differ between master instances: a client holding one
    // from before a restart gets NOT_FOUND, never someone else's space.
    RandomBytes(&o.id_salt, sizeof o.id_salt);
    return o;
  }

  Status Start(const MasterConfig& config) {
    SLUICE_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(config.listen, true));
    if (config.fast_lane_connections > 0) {
      HostPort fast = hp;
      fast.port = 0;
      SLUICE_ASSIGN_OR_RETURN(
          fast_lane_,
          fastlane::Server::Start(
              fast,
              [this](fastlane::Method m, std::string_view body, fastlane::Responder respond) {
                HandleFast(m, body, std::move(respond));
              },
              fastlane::ServerLimits{config.fast_lane_connections}, FastLaneKey(config.security)));
    }
    grpc::ServerBuilder builder;
    // A second master on the same port must fail, not split the metadata.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    int port = 0;
    builder.AddListeningPort(hp.ToString(), auth_.ServerCredentials(config.security), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port == 0) {
      return UnavailableError("master cannot listen on " + hp.ToString(), FailureScope::kTransport);
    }
    hp.port = static_cast<std::uint16_t>(port);
    endpoint_ = hp.ToString();
    if (fast_lane_) {
      lane_offered_ = fast_lane_->endpoint();
    }
    if (!config.advertise.empty()) {
      SLUICE_ASSIGN_OR_RETURN(endpoint_, AdvertisedEndpoint(hp, config.advertise, "advertise"));
      if (fast_lane_) {
        SLUICE_ASSIGN_OR_RETURN(HostPort lane, ParseHostPort(fast_lane_->endpoint(), false));
        SLUICE_ASSIGN_OR_RETURN(HostPort there, ParseHostPort(endpoint_, false));
        lane_offered_ = HostPort{there.host, lane.port}.ToString();
      }
    }
    SLUICE_LOG(info, "store master listening on {} (fast lane {})", endpoint_,
               fast_lane_ ? lane_offered_ : "off");
    return Status::Ok();
  }

  ~MasterServerImpl() override {
    StopMetrics();
    core_.Shutdown();  // Answers parked calls, so lane threads can end.
    fast_lane_.reset();
    if (server_ != nullptr) {
      // Cancels what is still in flight (event streams) at once.
      server_->Shutdown(std::chrono::system_clock::now());
    }
  }

  const std::string& endpoint() const { return endpoint_; }
  MasterMetrics Metrics() { return core_.Metrics(); }

  grpc::ServerUnaryReactor* Describe(grpc::CallbackServerContext* ctx,
                                     const pb::DescribeRequest* req,
                                     pb::DescribeResponse* resp) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    if (req->usage()) {
      const MasterMetrics m = core_.Metrics();
      pb::StoreUsage* u = resp->mutable_usage();
      u->set_nodes(m.nodes);
      u->set_objects(m.objects);
      u->set_memory_capacity_bytes(m.capacity_bytes);
      u->set_memory_used_bytes(m.used_bytes);
      u->set_disk_capacity_bytes(m.disk_capacity_bytes);
      u->set_disk_used_bytes(m.disk_used_bytes);
      for (const auto& [name, c] : m.cache_classes) {
        pb::StoreUsage::CacheClass& out = (*u->mutable_cache_classes())[name];
        out.set_objects(c.objects);
        out.set_bytes(c.bytes);
        out.set_budget_bytes(c.budget_bytes);
      }
    }
    if (fast_lane_) {
      resp->set_fast_lane_endpoint(lane_offered_);
    }
    for (std::string& ep : core_.NodeEndpoints()) {
      resp->add_node_endpoints(std::move(ep));
    }
    return Done(ctx, Status::Ok());
  }
  grpc::ServerUnaryReactor* RegisterNode(grpc::CallbackServerContext* ctx,
                                         const pb::RegisterNodeRequest* req,
                                         pb::RegisterNodeResponse* resp) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    return Done(ctx, core_.RegisterNode(*req, resp));
  }
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const pb::HeartbeatRequest* req,
                                      pb::HeartbeatResponse* resp) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    // gRPC keeps `req` and `resp` alive until Finish.
    core_.Heartbeat(req, resp, [reactor](const Status& s) { reactor->Finish(ToGrpc(s)); });
    return reactor;
  }
  grpc::ServerUnaryReactor* PutStart(grpc::CallbackServerContext* ctx,
                                     const pb::PutStartRequest* req,
                                     pb::PutStartResponse* resp) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    return Done(ctx, core_.PutStart(*req, resp));
  }
  grpc::ServerUnaryReactor* PutEnd(grpc::CallbackServerContext* ctx, const pb::PutEndRequest* req,
                                   pb::PutEndResponse* resp) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    // gRPC keeps `req` and `resp` alive until Finish.
    core_.PutEnd(req, resp, [reactor](const Status& s) { reactor->Finish(ToGrpc(s)); });
    return reactor;
  }
  grpc::ServerUnaryReactor* PutReserved(grpc::CallbackServerContext* ctx,
                                        const pb::PutReservedRequest* req,
                                        pb::PutReservedResponse* resp) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    core_.PutReserved(req, resp, [reactor](const Status& s) { reactor->Finish(ToGrpc(s)); });
    return reactor;
  }
  grpc::ServerUnaryReactor* Unreserve(grpc::CallbackServerContext* ctx,
                                      const pb::UnreserveRequest* req,
                                      pb::UnreserveResponse*) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    return Done(ctx, core_.Unreserve(*req));
  }
  grpc::ServerUnaryReactor* PutRevoke(grpc::CallbackServerContext* ctx,
                                      const pb::PutRevokeRequest* req,
                                      pb::PutRevokeResponse*) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    return Done(ctx, core_.PutRevoke(*req));
  }
  grpc::ServerUnaryReactor* GetStart(grpc::CallbackServerContext* ctx,
                                     const pb::GetStartRequest* req,
                                     pb::GetStartResponse* resp) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    // gRPC keeps `req` and `resp` alive until Finish.
    core_.GetStart(req, resp, [reactor](const Status& s) { reactor->Finish(ToGrpc(s)); });
    return reactor;
  }
  grpc::ServerUnaryReactor* GetEnd(grpc::CallbackServerContext* ctx, const pb::GetEndRequest* req,
                                   pb::GetEndResponse*) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    return Done(ctx, core_.GetEnd(*req));
  }
  grpc::ServerUnaryReactor* RenewRead(grpc::CallbackServerContext* ctx,
                                      const pb::RenewReadRequest* req,
                                      pb::RenewReadResponse*) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    return Done(ctx, core_.RenewRead(*req));
  }
  grpc::ServerUnaryReactor* Remove(grpc::CallbackServerContext* ctx, const pb::KeyRequest* req,
                                   pb::RemoveResponse*) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    return Done(ctx, core_.Remove(*req));
  }
  grpc::ServerUnaryReactor* Exists(grpc::CallbackServerContext* ctx, const pb::KeyRequest* req,
                                   pb::ExistsResponse* resp) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    return Done(ctx, core_.Exists(*req, resp));
  }
  grpc::ServerUnaryReactor* WaitFor(grpc::CallbackServerContext* ctx, const pb::WaitForRequest* req,
                                    pb::WaitForResponse*) override {
    if (grpc::ServerUnaryReactor* r = auth_.Refused(ctx)) {
      return r;
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    core_.WaitFor(*req, [reactor](const Status& s) { reactor->Finish(ToGrpc(s)); });
    return reactor;
  }

  grpc::ServerWriteReactor<pb::ObjectEvent>* WatchEvents(grpc::CallbackServerContext* ctx,
                                                         const pb::WatchRequest*) override {
    auto* w = new EventWatcher([this](EventWatcher* gone) {
      MutexLock lock(watchers_mu_);
      watchers_.erase(gone);
    });
    if (grpc::Status s = auth_.Check(*ctx); !s.ok()) {
      w->Refuse(s);  // Never joins watchers_; deleted on OnDone.
      return w;
    }
    MutexLock lock(watchers_mu_);
    watchers_.insert(w);
    return w;
  }

 private:
  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const Status& s) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpc(s));
    return reactor;
  }

  void Publish(const std::vector<ObjectEvent>& events) {
    MutexLock lock(watchers_mu_);
    for (const ObjectEvent& e : events) {
      for (EventWatcher* w : watchers_) {
        w->Push(e);
      }
    }
  }

  // One fast-lane call: parse, run, serialize. Runs on a lane connection
  // thread.
  template <typename Req, typename Resp, typename Fn>
  static Result<std::string> Unary(std::string_view body, Fn fn) {
    Req req;
    if (!req.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      return InvalidArgumentError(std::string("malformed ") + Req::descriptor()->name());
    }
    Resp resp;
    SLUICE_RETURN_IF_ERROR(fn(req, &resp));
    return resp.SerializeAsString();
  }

  // A fast-lane call that may park (a read of a key not yet committed, a
  // WaitFor): `start(req, resp, done)` runs it, and `done` answers from
  // whichever thread completes it — the committing thread for a parked one,
  // with no hand-off back to the connection's thread.
  template <typename Req, typename Resp, typename Start>
  static void Parkable(std::string_view body, fastlane::Responder respond, Start start) {
    struct Call {
      explicit Call(fastlane::Responder r) : respond(std::move(r)) {}
      Req req;
      Resp resp;
      fastlane::Responder respond;
    };
    auto call = std::make_shared<Call>(std::move(respond));
    if (!call->req.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      call->respond(InvalidArgumentError(std::string("malformed ") + Req::descriptor()->name()));
      return;
    }
    // `call` stays alive in the completion until it has answered.
    start(call->req, &call->resp, [call](const Status& s) {
      call->respond(s.ok() ? Result<std::string>(call->resp.SerializeAsString())
                           : Result<std::string>(s));
    });
  }

  void HandleFast(fastlane::Method m, std::string_view body, fastlane::Responder respond) {
    using fastlane::Method;
    switch (m) {
      case Method::kGetStart:
        Parkable<pb::GetStartRequest, pb::GetStartResponse>(
            body, std::move(respond), [this](const auto& q, auto* r, MasterCore::Done d) {
              core_.GetStart(&q, r, std::move(d));
            });
        return;
      case Method::kPutEnd:
        Parkable<pb::PutEndRequest, pb::PutEndResponse>(
            body, std::move(respond), [this](const auto& q, auto* r, MasterCore::Done d) {
              core_.PutEnd(&q, r, std::move(d));
            });
        return;
      case Method::kPutReserved:
        Parkable<pb::PutReservedRequest, pb::PutReservedResponse>(
            body, std::move(respond), [this](const auto& q, auto* r, MasterCore::Done d) {
              core_.PutReserved(&q, r, std::move(d));
            });
        return;
      case Method::kWaitFor:
        Parkable<pb::WaitForRequest, pb::WaitForResponse>(
            body, std::move(respond),
            [this](const auto& q, auto*, MasterCore::Done d) { core_.WaitFor(q, std::move(d)); });
        return;
      default:
        respond(HandleUnary(m, body));
    }
  }

  Result<std::string> HandleUnary(fastlane::Method m, std::string_view body) {
    using fastlane::Method;
    switch (m) {
      case Method::kPutStart:
        return Unary<pb::PutStartRequest, pb::PutStartResponse>(
            body, [this](const auto& q, auto* r) { return core_.PutStart(q, r); });
      case Method::kUnreserve:
        return Unary<pb::UnreserveRequest, pb::UnreserveResponse>(
            body, [this](const auto& q, auto*) { return core_.Unreserve(q); });
      case Method::kPutRevoke:
        return Unary<pb::PutRevokeRequest, pb::PutRevokeResponse>(
            body, [this](const auto& q, auto*) { return core_.PutRevoke(q); });
      case Method::kGetEnd:
        return Unary<pb::GetEndRequest, pb::GetEndResponse>(
            body, [this](const auto& q, auto*) { return core_.GetEnd(q); });
      case Method::kRemove:
        return Unary<pb::KeyRequest, pb::RemoveResponse>(
            body, [this](const auto& q, auto*) { return core_.Remove(q); });
      case Method::kExists:
        return Unary<pb::KeyRequest, pb::ExistsResponse>(
            body, [this](const auto& q, auto* r) { return core_.Exists(q, r); });
      case Method::kGetStart:
      case Method::kWaitFor:
      case Method::kPutEnd:
      case Method::kPutReserved:
        break;  // Parkable: HandleFast.
      case Method::kHello:
        break;  // The lane's own.
    }
    return InvalidArgumentError("fast lane: unknown method");
  }

  CallAuthenticator auth_;
  Mutex watchers_mu_;  // Taken inside the core's lock (Publish).
  std::set<EventWatcher*> watchers_ SLUICE_GUARDED_BY(watchers_mu_);
  MasterCore core_;  // After the watchers: its ticker publishes to them.
  std::unique_ptr<fastlane::Server> fast_lane_;
  std::string lane_offered_;  // The fast lane's endpoint as clients are told it.
  std::unique_ptr<grpc::Server> server_;
  std::string endpoint_;
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::string metrics_endpoint_;

 public:
  Status StartMetrics(const std::string& listen, int metrics_port) {
    if (metrics_port < 0) {
      return Status::Ok();
    }
    SLUICE_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(listen, true));
    SLUICE_ASSIGN_OR_RETURN(
        metrics_, MetricsEndpoint::Start("master", hp.host, metrics_port, [this](bool openmetrics) {
          return Exposition(openmetrics);
        }));
    metrics_endpoint_ = metrics_->endpoint();
    return Status::Ok();
  }
  void StopMetrics() { metrics_.reset(); }
  const std::string& metrics_endpoint() const { return metrics_endpoint_; }

  // The master's exposition: Prometheus text, or OpenMetrics when the
  // scrape asks for it.
  std::string Exposition(bool openmetrics) {
    const MasterMetrics m = core_.Metrics();
    MetricsText out(openmetrics);
    out.Gauge("sluice_store_nodes", "Registered store nodes.", m.nodes);
    out.Gauge("sluice_store_objects", "Committed objects.", m.objects);
    out.Gauge("sluice_store_objects_cached", "Committed cache and soft-pin objects (evictable).",
              m.objects_cached);
    out.Gauge("sluice_store_objects_writing", "Objects with an open put.", m.objects_writing);
    out.Family("sluice_store_bytes", "Store bytes per tier.", "gauge");
    out.Sample("sluice_store_bytes", {{"tier", "memory"}, {"state", "capacity"}}, m.capacity_bytes);
    out.Sample("sluice_store_bytes", {{"tier", "memory"}, {"state", "used"}}, m.used_bytes);
    out.Sample("sluice_store_bytes", {{"tier", "disk"}, {"state", "capacity"}},
               m.disk_capacity_bytes);
    out.Sample("sluice_store_bytes", {{"tier", "disk"}, {"state", "used"}}, m.disk_used_bytes);
    out.Gauge("sluice_store_free_extents", "Free memory ranges over all segments.", m.free_extents);
    out.Gauge("sluice_store_fragmentation", "1 - largest free extents / free bytes.",
              m.fragmentation);
    out.Counter("sluice_store_spills_total", "Objects moved from memory to the disk tier.",
                m.spills);
    out.Counter("sluice_store_loads_total", "Spilled objects loaded back for readers.", m.loads);
    out.Counter("sluice_store_evictions_total", "Objects evicted under memory pressure.",
                m.evictions);
    out.Counter("sluice_store_lease_expiries_total", "Put and read leases that timed out.",
                m.lease_expiries);
    out.Gauge("sluice_store_reservations", "Space held for clients' next puts.", m.reservations);
    out.Counter("sluice_store_reserved_puts_total",
                "Puts committed in one round trip over a reservation.", m.reserved_puts);
    out.Counter("sluice_store_objects_lost_total", "Objects that lost their last replica.",
                m.objects_lost);
    out.Counter("sluice_store_soft_pins_total", "Cache objects soft-pinned by their reads.",
                m.soft_pins);
    out.Gauge("sluice_store_unacked_changes",
              "Directory changes store nodes have not acknowledged yet.", m.unacked_changes);
    out.Gauge("sluice_store_waiters",
              "Calls waiting for a key to be put (WaitFor, gets with a wait).", m.waiters);
    const std::pair<const char*, std::uint64_t CacheClassMetrics::*> per_class[] = {
        {"sluice_store_cache_objects", &CacheClassMetrics::objects},
        {"sluice_store_cache_bytes", &CacheClassMetrics::bytes},
        {"sluice_store_cache_budget_bytes", &CacheClassMetrics::budget_bytes},
        {"sluice_store_cache_evictions_total", &CacheClassMetrics::evictions}};
    for (const auto& [name, member] : per_class) {
      out.Family(name, "Per cache class (0 budget: none).",
                 std::string_view(name).ends_with("_total") ? "counter" : "gauge");
      for (const auto& [c, cm] : m.cache_classes) {
        out.Sample(name, {{"class", c}}, static_cast<double>(cm.*member));
      }
    }
    core_.WriteRpcStats(out);
    if (fast_lane_) {
      out.Gauge("sluice_master_fast_lane_connections", "Open fast-lane connections.",
                fast_lane_->connections());
      out.Counter("sluice_master_fast_lane_requests_total", "Calls served over the fast lane.",
                  fast_lane_->requests());
    }
    return out.text();
  }
};

}  // namespace sluice::internal

namespace sluice {

MasterServer::MasterServer(std::unique_ptr<internal::MasterServerImpl> impl)
    : impl_(std::move(impl)) {}
MasterServer::~MasterServer() = default;

Result<std::unique_ptr<MasterServer>> MasterServer::Start(const MasterConfig& config) {
  internal::RouteProtobufLogs();  // Peers' malformed messages must not flood the log.
  if (!(config.low_watermark > 0 && config.low_watermark <= config.high_watermark &&
        config.high_watermark <= 1.0)) {
    return InvalidArgumentError("master: need 0 < low_watermark <= high_watermark <= 1");
  }
  if (config.reservation_ttl.count() < 0 || config.reservation_ttl > std::chrono::minutes(10)) {
    return InvalidArgumentError("master: reservation_ttl must be in 0..600000 ms");
  }
  if (config.heartbeat_interval.count() <= 0 || config.node_timeout <= config.heartbeat_interval) {
    return InvalidArgumentError("master: node_timeout must exceed heartbeat_interval > 0");
  }
  double budgets = 0;
  for (const auto& [c, fraction] : config.cache_budgets) {
    if (!IsCacheClassName(c) || !(fraction > 0 && fraction <= 1)) {
      return InvalidArgumentError("master: cache budget '" + c +
                                  "': want a class of 1..32 [a-z0-9_] and a share in (0, 1]");
    }
    budgets += fraction;
  }
  if (budgets > 1.0 + 1e-9) {
    return InvalidArgumentError("master: cache budgets add up to more than the whole store");
  }
  auto impl = std::make_unique<internal::MasterServerImpl>(config);
  SLUICE_RETURN_IF_ERROR(impl->Start(config));
  SLUICE_RETURN_IF_ERROR(impl->StartMetrics(config.listen, config.metrics_port));
  return std::unique_ptr<MasterServer>(new MasterServer(std::move(impl)));
}

const std::string& MasterServer::endpoint() const {
  return impl_->endpoint();
}
MasterMetrics MasterServer::Metrics() const {
  return impl_->Metrics();
}
const std::string& MasterServer::metrics_endpoint() const {
  return impl_->metrics_endpoint();
}

}  // namespace sluice
