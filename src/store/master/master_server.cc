// gRPC face of MasterState: one mutex around the state, a ticker thread for
// timeouts, and WaitFor calls parked until their key commits or times out.
#include <httplib.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "sluice/store/master.h"

#include "common/log.h"
#include "common/net.h"
#include "proto/master.grpc.pb.h"
#include "store/master/master_state.h"
#include "store/proto_convert.h"
#include "store/rpc_status.h"

namespace sluice::internal {

namespace pb = ::sluice::store::v1;

// Per-method RPC latency, exported as Prometheus histograms.
class RpcStats {
 public:
  enum Method {
    kRegisterNode,
    kHeartbeat,
    kPutStart,
    kPutEnd,
    kPutRevoke,
    kGetStart,
    kGetEnd,
    kRemove,
    kExists,
    kCount
  };
  static constexpr std::array<const char*, kCount> kNames = {
      "RegisterNode", "Heartbeat", "PutStart", "PutEnd", "PutRevoke",
      "GetStart",     "GetEnd",    "Remove",   "Exists"};
  static constexpr std::array<double, 8> kBuckets = {25e-6,  50e-6, 100e-6, 250e-6,
                                                     500e-6, 1e-3,  1e-2,   1e-1};

  void Record(Method m, MasterClock::time_point start) {
    const double s = std::chrono::duration<double>(MasterClock::now() - start).count();
    std::lock_guard<std::mutex> lock(mu_);
    Hist& h = hist_[m];
    ++h.count;
    h.sum += s;
    for (std::size_t b = 0; b < kBuckets.size(); ++b) {
      h.buckets[b] += s <= kBuckets[b] ? 1 : 0;
    }
  }

  void Write(std::ostringstream& out) {
    std::lock_guard<std::mutex> lock(mu_);
    out << "# HELP sluice_master_rpc_seconds Master RPC handling time.\n"
        << "# TYPE sluice_master_rpc_seconds histogram\n";
    for (int m = 0; m < kCount; ++m) {
      const Hist& h = hist_[m];
      for (std::size_t b = 0; b < kBuckets.size(); ++b) {
        out << "sluice_master_rpc_seconds_bucket{method=\"" << kNames[m] << "\",le=\""
            << kBuckets[b] << "\"} " << h.buckets[b] << "\n";
      }
      out << "sluice_master_rpc_seconds_bucket{method=\"" << kNames[m] << "\",le=\"+Inf\"} "
          << h.count << "\n";
      out << "sluice_master_rpc_seconds_sum{method=\"" << kNames[m] << "\"} " << h.sum << "\n";
      out << "sluice_master_rpc_seconds_count{method=\"" << kNames[m] << "\"} " << h.count << "\n";
    }
  }

 private:
  struct Hist {
    std::uint64_t count = 0;
    double sum = 0;
    std::array<std::uint64_t, kBuckets.size()> buckets{};
  };
  std::mutex mu_;
  std::array<Hist, kCount> hist_{};
};

// One WatchEvents stream: events queue up here and are written one at a
// time. Lives until gRPC calls OnDone.
class EventWatcher final : public grpc::ServerWriteReactor<pb::ObjectEvent> {
 public:
  using OnGone = std::function<void(EventWatcher*)>;
  explicit EventWatcher(OnGone on_gone) : on_gone_(std::move(on_gone)) {}

  void Push(const ObjectEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
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
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!finished_) {
      finished_ = true;
      Finish(grpc::Status::CANCELLED);
    }
  }
  void OnDone() override {
    on_gone_(this);
    delete this;
  }

 private:
  OnGone on_gone_;
  std::mutex mu_;
  std::deque<pb::ObjectEvent> queue_;  // Front is being written when writing_.
  bool writing_ = false;
  bool finished_ = false;
};

class MasterServerImpl final : public pb::Master::CallbackService {
 public:
  explicit MasterServerImpl(const MasterConfig& c) : state_(ToOptions(c)) {}

  static MasterOptions ToOptions(const MasterConfig& c) {
    MasterOptions o;
    o.heartbeat_interval = c.heartbeat_interval;
    o.node_timeout = c.node_timeout;
    o.put_timeout = c.put_timeout;
    o.read_lease_timeout = c.read_lease_timeout;
    o.high_watermark = c.high_watermark;
    o.low_watermark = c.low_watermark;
    return o;
  }

  Status Start(const std::string& listen) {
    SLUICE_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(listen, true));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(hp.ToString(), grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port == 0) {
      return UnavailableError("master cannot listen on " + hp.ToString(), FailureScope::kTransport);
    }
    hp.port = static_cast<std::uint16_t>(port);
    endpoint_ = hp.ToString();
    ticker_ = std::thread([this] { TickLoop(); });
    SLUICE_LOG(info, "store master listening on {}", endpoint_);
    return Status::Ok();
  }

  ~MasterServerImpl() override {
    StopMetrics();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      for (auto& [key, ws] : waiters_) {
        for (Waiter& w : ws) {
          w.reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "master is shutting down"));
        }
      }
      waiters_.clear();
      for (auto& [key, ps] : parked_gets_) {
        for (ParkedGet& p : ps) {
          p.reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "master is shutting down"));
        }
      }
      parked_gets_.clear();
    }
    cv_.notify_all();
    if (ticker_.joinable()) {
      ticker_.join();
    }
    if (server_ != nullptr) {
      // Cancels what is still in flight (event streams) at once.
      server_->Shutdown(std::chrono::system_clock::now());
    }
  }

  const std::string& endpoint() const { return endpoint_; }

  MasterMetrics Metrics() {
    std::lock_guard<std::mutex> lock(mu_);
    MasterStats s = state_.Stats();
    return MasterMetrics{
        s.nodes,     s.objects,        s.objects_writing, s.capacity_bytes,      s.used_bytes,
        s.evictions, s.lease_expiries, s.objects_lost,    s.disk_capacity_bytes, s.disk_used_bytes,
        s.spills,    s.loads,          s.free_extents,    s.fragmentation};
  }

  grpc::ServerUnaryReactor* RegisterNode(grpc::CallbackServerContext* ctx,
                                         const pb::RegisterNodeRequest* req,
                                         pb::RegisterNodeResponse* resp) override {
    const auto start = MasterClock::now();
    std::vector<SegmentDesc> segs;
    for (const pb::Segment& s : req->segments()) {
      segs.push_back({s.region_key(), s.size()});
    }
    std::vector<ObjectRecord> objects;
    for (const pb::ObjectRecord& o : req->objects()) {
      objects.push_back(FromProto(o));
    }
    std::size_t skipped = 0;
    Status st;
    {
      std::lock_guard<std::mutex> lock(mu_);
      st = state_.RegisterNode(req->node_id(), req->endpoint(),
                               NodeResources{segs, req->disk_bytes()}, objects, MasterClock::now(),
                               &skipped);
    }
    if (st.ok()) {
      SLUICE_LOG(info, "store node {} at {} registered {} segment(s), {} object(s), {} skipped",
                 req->node_id(), req->endpoint(), segs.size(), objects.size() - skipped, skipped);
    }
    resp->set_skipped_objects(skipped);
    resp->set_heartbeat_interval_ms(
        static_cast<std::uint64_t>(state_.options().heartbeat_interval.count()));
    return Done(ctx, RpcStats::kRegisterNode, start, st);
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const pb::HeartbeatRequest* req,
                                      pb::HeartbeatResponse* resp) override {
    const auto start = MasterClock::now();
    std::vector<CommandResult> done;
    for (const pb::CommandResult& r : req->done()) {
      done.push_back({r.id(), r.ok(), r.error()});
      if (!r.ok()) {
        SLUICE_LOG(warn, "store node {}: disk-tier command {} failed: {}", req->node_id(), r.id(),
                   r.error());
      }
    }
    HeartbeatReply reply;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reply = state_.Heartbeat(req->node_id(), req->acked_seq(), done, MasterClock::now());
      ResumeParkedGetsLocked(state_.TakeLoaded());
    }
    for (const NodeCommand& c : reply.commands) {
      pb::NodeCommand* p = resp->add_commands();
      p->set_id(c.id);
      p->set_kind(c.kind == NodeCommand::Kind::kSpill ? pb::NodeCommand::SPILL
                                                      : pb::NodeCommand::LOAD);
      p->set_key(c.key);
      p->set_mem_region_key(c.mem_region_key);
      p->set_mem_offset(c.mem_offset);
      p->set_disk_offset(c.disk_offset);
      p->set_size(c.size);
    }
    resp->set_reregister(reply.reregister);
    for (const NodeDelta& d : reply.deltas) {
      pb::NodeDelta* p = resp->add_deltas();
      p->set_seq(d.seq);
      p->set_added(d.added);
      if (d.added) {
        ToProto(d.record, p->mutable_record());
      } else {
        p->mutable_record()->set_key(d.record.key);
      }
    }
    return Done(ctx, RpcStats::kHeartbeat, start, Status::Ok());
  }

  grpc::ServerUnaryReactor* PutStart(grpc::CallbackServerContext* ctx,
                                     const pb::PutStartRequest* req,
                                     pb::PutStartResponse* resp) override {
    const auto start = MasterClock::now();
    PutRequest r;
    r.key = req->key();
    r.size = req->size();
    if (req->has_tensor()) {
      r.tensor = FromProto(req->tensor());
    }
    r.policy = FromProto(req->policy());
    r.replica_num = req->replica_num();
    r.preferred_node = req->preferred_node();
    r.request_id = req->request_id();
    Result<PutGrant> g = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return state_.PutStart(r, MasterClock::now());
    }();
    if (g.ok()) {
      resp->set_put_id(g->put_id);
      for (const ReplicaLocation& loc : g->replicas) {
        ToProto(loc, resp->add_replicas());
      }
    }
    return Done(ctx, RpcStats::kPutStart, start, g.status());
  }

  grpc::ServerUnaryReactor* PutEnd(grpc::CallbackServerContext* ctx, const pb::PutEndRequest* req,
                                   pb::PutEndResponse*) override {
    const auto start = MasterClock::now();
    std::vector<Waiter> wake;
    Status st;
    {
      std::lock_guard<std::mutex> lock(mu_);
      st = state_.PutEnd(req->key(), req->put_id(), MasterClock::now());
      auto it = waiters_.find(req->key());
      if (st.ok() && it != waiters_.end()) {
        wake = std::move(it->second);
        waiters_.erase(it);
      }
    }
    for (Waiter& w : wake) {
      w.reactor->Finish(grpc::Status::OK);
    }
    return Done(ctx, RpcStats::kPutEnd, start, st);
  }

  grpc::ServerUnaryReactor* PutRevoke(grpc::CallbackServerContext* ctx,
                                      const pb::PutRevokeRequest* req,
                                      pb::PutRevokeResponse*) override {
    const auto start = MasterClock::now();
    std::lock_guard<std::mutex> lock(mu_);
    return Done(ctx, RpcStats::kPutRevoke, start, state_.PutRevoke(req->key(), req->put_id()));
  }

  grpc::ServerUnaryReactor* GetStart(grpc::CallbackServerContext* ctx,
                                     const pb::GetStartRequest* req,
                                     pb::GetStartResponse* resp) override {
    const auto start = MasterClock::now();
    std::unique_lock<std::mutex> lock(mu_);
    Result<ReadGrant> g = state_.GetStart(req->key(), req->client_endpoint(), MasterClock::now());
    if (g.ok() && g->loading) {
      // On the disk tier: answer once the node has loaded it back.
      grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
      parked_gets_[req->key()].push_back(
          ParkedGet{reactor, req, resp, start, MasterClock::now() + kParkedGetTimeout});
      return reactor;
    }
    lock.unlock();
    if (g.ok()) {
      FillGetStart(*g, resp);
    }
    return Done(ctx, RpcStats::kGetStart, start, g.status());
  }

  grpc::ServerUnaryReactor* GetEnd(grpc::CallbackServerContext* ctx, const pb::GetEndRequest* req,
                                   pb::GetEndResponse*) override {
    const auto start = MasterClock::now();
    std::lock_guard<std::mutex> lock(mu_);
    return Done(ctx, RpcStats::kGetEnd, start,
                state_.GetEnd(req->key(), req->lease_id(), req->completed()));
  }

  grpc::ServerUnaryReactor* Remove(grpc::CallbackServerContext* ctx, const pb::KeyRequest* req,
                                   pb::RemoveResponse*) override {
    const auto start = MasterClock::now();
    std::lock_guard<std::mutex> lock(mu_);
    return Done(ctx, RpcStats::kRemove, start, state_.Remove(req->key()));
  }

  grpc::ServerUnaryReactor* Exists(grpc::CallbackServerContext* ctx, const pb::KeyRequest* req,
                                   pb::ExistsResponse* resp) override {
    const auto start = MasterClock::now();
    std::lock_guard<std::mutex> lock(mu_);
    resp->set_exists(state_.Exists(req->key()));
    return Done(ctx, RpcStats::kExists, start, Status::Ok());
  }

  grpc::ServerUnaryReactor* WaitFor(grpc::CallbackServerContext* ctx, const pb::WaitForRequest* req,
                                    pb::WaitForResponse*) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (req->key().empty() || req->key().size() > 1024) {
      reactor->Finish(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "key must be 1..1024 bytes"));
      return reactor;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "master is shutting down"));
      return reactor;
    }
    if (state_.Exists(req->key())) {
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    const auto timeout =
        std::chrono::milliseconds(std::min<std::uint64_t>(req->timeout_ms(), 3600000));
    waiters_[req->key()].push_back(Waiter{reactor, MasterClock::now() + timeout});
    return reactor;
  }

  grpc::ServerWriteReactor<pb::ObjectEvent>* WatchEvents(grpc::CallbackServerContext*,
                                                         const pb::WatchRequest*) override {
    auto* w = new EventWatcher([this](EventWatcher* gone) {
      std::lock_guard<std::mutex> lock(watchers_mu_);
      watchers_.erase(gone);
    });
    std::lock_guard<std::mutex> lock(watchers_mu_);
    watchers_.insert(w);
    return w;
  }

 private:
  static constexpr std::chrono::seconds kParkedGetTimeout{30};
  struct ParkedGet {
    grpc::ServerUnaryReactor* reactor;
    const pb::GetStartRequest* req;  // gRPC keeps both alive until Finish.
    pb::GetStartResponse* resp;
    MasterClock::time_point start;
    TimePoint deadline;
  };

  static void FillGetStart(const ReadGrant& g, pb::GetStartResponse* resp) {
    resp->set_lease_id(g.lease_id);
    resp->set_size(g.meta.size);
    if (g.meta.tensor.has_value()) {
      ToProto(*g.meta.tensor, resp->mutable_tensor());
    }
    for (const ReplicaLocation& loc : g.replicas) {
      ToProto(loc, resp->add_replicas());
    }
  }

  // Asks again for parked readers of `keys` (or of every parked key when
  // `keys` is empty, e.g. after memory was freed); finishes those answered.
  void ResumeParkedGetsLocked(const std::vector<std::string>& keys, bool all = false) {
    const TimePoint now = MasterClock::now();
    std::vector<std::string> todo = keys;
    if (all) {
      todo.clear();
      for (const auto& [k, v] : parked_gets_) {
        todo.push_back(k);
      }
    }
    for (const std::string& key : todo) {
      auto it = parked_gets_.find(key);
      if (it == parked_gets_.end()) {
        continue;
      }
      std::vector<ParkedGet> still;
      for (ParkedGet& p : it->second) {
        Result<ReadGrant> g = state_.GetStart(key, p.req->client_endpoint(), now);
        if (g.ok() && g->loading) {
          if (now < p.deadline) {
            still.push_back(p);
            continue;
          }
          g = UnavailableError("object '" + key + "' was not loaded from disk in time",
                               FailureScope::kRequest);
        }
        if (g.ok()) {
          FillGetStart(*g, p.resp);
        }
        rpc_stats_.Record(RpcStats::kGetStart, p.start);
        p.reactor->Finish(ToGrpc(g.status()));
      }
      if (still.empty()) {
        parked_gets_.erase(it);
      } else {
        it->second = std::move(still);
      }
    }
  }

  struct Waiter {
    grpc::ServerUnaryReactor* reactor;
    TimePoint deadline;
  };

  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, RpcStats::Method method,
                                 MasterClock::time_point start, const Status& s) {
    rpc_stats_.Record(method, start);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpc(s));
    return reactor;
  }

  void TickLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      const TimePoint now = MasterClock::now();
      state_.Tick(now);
      ResumeParkedGetsLocked(state_.TakeLoaded(), /*all=*/!parked_gets_.empty());
      const std::vector<ObjectEvent> events = state_.TakeEvents();
      if (!events.empty()) {
        std::lock_guard<std::mutex> wl(watchers_mu_);
        for (const ObjectEvent& e : events) {
          if (e.kind == ObjectEventKind::kLost) {
            SLUICE_LOG(warn, "object '{}' lost with its last replica", e.key);
          }
          for (EventWatcher* w : watchers_) {
            w->Push(e);
          }
        }
      }
      for (auto it = waiters_.begin(); it != waiters_.end();) {
        auto& ws = it->second;
        for (auto w = ws.begin(); w != ws.end();) {
          if (now >= w->deadline) {
            w->reactor->Finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                            "key '" + it->first + "' not complete in time"));
            w = ws.erase(w);
          } else {
            ++w;
          }
        }
        it = ws.empty() ? waiters_.erase(it) : std::next(it);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                                      // Guarded by mu_.
  MasterState state_;                                          // Guarded by mu_.
  std::map<std::string, std::vector<Waiter>> waiters_;         // Guarded by mu_.
  std::map<std::string, std::vector<ParkedGet>> parked_gets_;  // Guarded by mu_.
  std::unique_ptr<grpc::Server> server_;
  std::string endpoint_;
  std::thread ticker_;
  RpcStats rpc_stats_;
  std::mutex watchers_mu_;            // Taken after mu_ when both are held.
  std::set<EventWatcher*> watchers_;  // Guarded by watchers_mu_.
  httplib::Server http_;
  std::thread http_thread_;
  std::string metrics_endpoint_;

 public:
  Status StartMetrics(const std::string& listen, int metrics_port) {
    if (metrics_port < 0) {
      return Status::Ok();
    }
    if (metrics_port > 65535) {
      return InvalidArgumentError("master: metrics_port must be in 0..65535");
    }
    SLUICE_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(listen, true));
    hp.port = static_cast<std::uint16_t>(metrics_port);
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(MetricsText(), "text/plain; version=0.0.4");
    });
    const int port = hp.port == 0 ? http_.bind_to_any_port(hp.host)
                                  : (http_.bind_to_port(hp.host, hp.port) ? hp.port : -1);
    if (port <= 0) {
      return UnavailableError("metrics endpoint cannot listen on " + hp.ToString(),
                              FailureScope::kTransport);
    }
    hp.port = static_cast<std::uint16_t>(port);
    metrics_endpoint_ = hp.ToString();
    http_thread_ = std::thread([this] { http_.listen_after_bind(); });
    return Status::Ok();
  }
  void StopMetrics() {
    if (http_thread_.joinable()) {
      http_.stop();
      http_thread_.join();
    }
  }
  const std::string& metrics_endpoint() const { return metrics_endpoint_; }

  std::string MetricsText() {
    const MasterMetrics m = Metrics();
    std::ostringstream out;
    auto gauge = [&](const char* name, const char* help, const char* type, std::uint64_t v) {
      out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
          << name << " " << v << "\n";
    };
    gauge("sluice_store_nodes", "Registered store nodes.", "gauge", m.nodes);
    gauge("sluice_store_objects", "Committed objects.", "gauge", m.objects);
    gauge("sluice_store_objects_writing", "Objects with an open put.", "gauge", m.objects_writing);
    out << "# HELP sluice_store_bytes Store bytes per tier.\n# TYPE sluice_store_bytes gauge\n"
        << "sluice_store_bytes{tier=\"memory\",state=\"capacity\"} " << m.capacity_bytes << "\n"
        << "sluice_store_bytes{tier=\"memory\",state=\"used\"} " << m.used_bytes << "\n"
        << "sluice_store_bytes{tier=\"disk\",state=\"capacity\"} " << m.disk_capacity_bytes << "\n"
        << "sluice_store_bytes{tier=\"disk\",state=\"used\"} " << m.disk_used_bytes << "\n";
    gauge("sluice_store_free_extents", "Free memory ranges over all segments.", "gauge",
          m.free_extents);
    out << "# HELP sluice_store_fragmentation 1 - largest free extents / free bytes.\n"
        << "# TYPE sluice_store_fragmentation gauge\nsluice_store_fragmentation " << m.fragmentation
        << "\n";
    gauge("sluice_store_spills_total", "Objects moved from memory to the disk tier.", "counter",
          m.spills);
    gauge("sluice_store_loads_total", "Spilled objects loaded back for readers.", "counter",
          m.loads);
    gauge("sluice_store_evictions_total", "Objects evicted under memory pressure.", "counter",
          m.evictions);
    gauge("sluice_store_lease_expiries_total", "Put and read leases that timed out.", "counter",
          m.lease_expiries);
    gauge("sluice_store_objects_lost_total", "Objects that lost their last replica.", "counter",
          m.objects_lost);
    rpc_stats_.Write(out);
    return out.str();
  }
};

}  // namespace sluice::internal

namespace sluice {

MasterServer::MasterServer(std::unique_ptr<internal::MasterServerImpl> impl)
    : impl_(std::move(impl)) {}
MasterServer::~MasterServer() = default;

Result<std::unique_ptr<MasterServer>> MasterServer::Start(const MasterConfig& config) {
  if (!(config.low_watermark > 0 && config.low_watermark <= config.high_watermark &&
        config.high_watermark <= 1.0)) {
    return InvalidArgumentError("master: need 0 < low_watermark <= high_watermark <= 1");
  }
  if (config.heartbeat_interval.count() <= 0 || config.node_timeout <= config.heartbeat_interval) {
    return InvalidArgumentError("master: node_timeout must exceed heartbeat_interval > 0");
  }
  auto impl = std::make_unique<internal::MasterServerImpl>(config);
  SLUICE_RETURN_IF_ERROR(impl->Start(config.listen));
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
