#include "store/master/master_core.h"

#include <algorithm>

#include "common/log.h"
#include "common/mutex.h"
#include "store/proto_convert.h"

namespace sluice::internal {

namespace pb = ::sluice::store::v1;

MasterCore::MasterCore(const MasterOptions& options, EventSink sink)
    : options_(options), sink_(std::move(sink)), state_(options) {
  ticker_ = std::thread([this] { TickLoop(); });
}

MasterCore::~MasterCore() {
  Shutdown();
}

void MasterCore::Shutdown() {
  Finish finish;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    const Status cancelled(StatusCode::kCancelled, "master is shutting down");
    for (auto& [key, ws] : waiters_) {
      for (Waiter& w : ws) {
        finish.emplace_back(std::move(w.done), cancelled);
      }
    }
    waiters_.clear();
    for (auto& [key, ps] : parked_gets_) {
      for (ParkedGet& p : ps) {
        finish.emplace_back(std::move(p.done), cancelled);
      }
    }
    parked_gets_.clear();
    AnswerHeartbeatsLocked(MasterClock::now(), /*all=*/true, &finish);
    ResumeCommitsLocked(MasterClock::now(), /*all=*/true, &finish);
  }
  cv_.NotifyAll();
  if (ticker_.joinable()) {
    ticker_.join();
  }
  Run(finish);
}

void MasterCore::Run(Finish& finish) {
  for (auto& [done, status] : finish) {
    done(status);
  }
  finish.clear();
}

std::vector<std::string> MasterCore::NodeEndpoints() {
  MutexLock lock(mu_);
  return state_.NodeEndpoints();
}

MasterMetrics MasterCore::Metrics() {
  MutexLock lock(mu_);
  MasterStats s = state_.Stats();
  MasterMetrics m{s.nodes,
                  s.objects,
                  s.objects_writing,
                  s.capacity_bytes,
                  s.used_bytes,
                  s.evictions,
                  s.lease_expiries,
                  s.objects_lost,
                  s.disk_capacity_bytes,
                  s.disk_used_bytes,
                  s.spills,
                  s.loads,
                  s.free_extents,
                  s.fragmentation,
                  s.reservations,
                  s.reserved_puts,
                  s.objects_cached,
                  s.soft_pins,
                  s.unacked_changes,
                  0,
                  {}};
  for (const auto& [key, ws] : waiters_) {
    m.waiters += ws.size();
  }
  for (const auto& [c, cs] : s.cache_classes) {
    m.cache_classes[c] = {cs.objects, cs.bytes, cs.budget_bytes, cs.evictions};
  }
  return m;
}

Status MasterCore::RegisterNode(const pb::RegisterNodeRequest& req,
                                pb::RegisterNodeResponse* resp) {
  const auto start = MasterClock::now();
  std::vector<SegmentDesc> segs;
  for (const pb::Segment& s : req.segments()) {
    segs.push_back({s.region_key(), s.size()});
  }
  std::vector<ObjectRecord> objects;
  const TimePoint now = MasterClock::now();
  for (const pb::ObjectRecord& o : req.objects()) {
    objects.push_back(FromProto(o));
    if (o.ttl_left_ms() > 0) {
      objects.back().expires_at =
          now + std::chrono::milliseconds(std::min<std::uint64_t>(o.ttl_left_ms(), 1ULL << 40));
    }
  }
  std::size_t skipped = 0;
  Status st;
  {
    MutexLock lock(mu_);
    st = state_.RegisterNode(req.node_id(), req.endpoint(), NodeResources{segs, req.disk_bytes()},
                             objects, MasterClock::now(), &skipped);
  }
  if (st.ok()) {
    SLUICE_LOG(info, "store node {} at {} registered {} segment(s), {} object(s), {} skipped",
               req.node_id(), req.endpoint(), segs.size(), objects.size() - skipped, skipped);
  }
  resp->set_skipped_objects(skipped);
  resp->set_heartbeat_interval_ms(static_cast<std::uint64_t>(options_.heartbeat_interval.count()));
  rpc_stats_.Record(RpcStats::kRegisterNode, start);
  return st;
}

void MasterCore::FillHeartbeatLocked(const std::string& node_id, std::uint64_t acked_seq,
                                     const std::vector<CommandResult>& done,
                                     pb::HeartbeatResponse* resp) {
  const TimePoint now = MasterClock::now();
  const HeartbeatReply reply = state_.Heartbeat(node_id, acked_seq, done, now);
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
  // Durable commits wait for the node's acknowledgment: it sends the next
  // heartbeat at once instead of batching.
  resp->set_ack_now(options_.durable_commits && !reply.deltas.empty());
  for (const NodeDelta& d : reply.deltas) {
    pb::NodeDelta* p = resp->add_deltas();
    p->set_seq(d.seq);
    p->set_added(d.added);
    if (d.added) {
      ToProto(d.record, p->mutable_record());
      if (d.record.expires_at.has_value()) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(*d.record.expires_at - now);
        p->mutable_record()->set_ttl_left_ms(
            static_cast<std::uint64_t>(std::max<std::int64_t>(1, left.count())));
      }
    } else {
      p->mutable_record()->set_key(d.record.key);
    }
  }
}

void MasterCore::Heartbeat(const pb::HeartbeatRequest* req, pb::HeartbeatResponse* resp,
                           Done done) {
  const auto start = MasterClock::now();
  std::vector<CommandResult> results;
  for (const pb::CommandResult& r : req->done()) {
    results.push_back({r.id(), r.ok(), r.error()});
    if (!r.ok()) {
      SLUICE_LOG(warn, "store node {}: disk-tier command {} failed: {}", req->node_id(), r.id(),
                 r.error());
    }
  }
  Finish finish;
  {
    MutexLock lock(mu_);
    auto held = parked_heartbeats_.find(req->node_id());
    if (held != parked_heartbeats_.end()) {
      // The node gave up on it (or a second one runs): answer it empty.
      finish.emplace_back(std::move(held->second.done), Status::Ok());
      parked_heartbeats_.erase(held);
    }
    FillHeartbeatLocked(req->node_id(), req->acked_seq(), results, resp);
    ResumeCommitsLocked(MasterClock::now(), /*all=*/false, &finish);
    ResumeParkedGetsLocked(state_.TakeLoaded(), false, &finish);
    const bool news = resp->deltas_size() > 0 || resp->commands_size() > 0 || resp->reregister();
    if (req->wait_ms() > 0 && !stopping_ && !news) {
      const auto wait = std::chrono::milliseconds(std::min<std::uint32_t>(req->wait_ms(), 10000));
      parked_heartbeats_[req->node_id()] =
          ParkedHeartbeat{req, resp, start, MasterClock::now() + wait, std::move(done)};
      done = nullptr;
    }
  }
  Run(finish);
  if (done) {
    rpc_stats_.Record(RpcStats::kHeartbeat, start);
    done(Status::Ok());
  }
}

void MasterCore::AnswerHeartbeatsLocked(TimePoint now, bool all, Finish* finish) {
  for (auto it = parked_heartbeats_.begin(); it != parked_heartbeats_.end();) {
    ParkedHeartbeat& p = it->second;
    if (!all && now < p.deadline && !state_.HasNews(it->first, p.req->acked_seq())) {
      ++it;
      continue;
    }
    p.resp->Clear();
    if (!stopping_) {
      FillHeartbeatLocked(it->first, p.req->acked_seq(), {}, p.resp);
    }
    rpc_stats_.Record(RpcStats::kHeartbeat, p.start);
    finish->emplace_back(
        std::move(p.done),
        stopping_ ? Status(StatusCode::kCancelled, "master is shutting down") : Status::Ok());
    it = parked_heartbeats_.erase(it);
  }
}

namespace {

PutRequest FromPutFields(const std::string& key, std::uint64_t size, const pb::TensorMeta* tensor,
                         const pb::LeasePolicy& policy, const std::string& request_id) {
  PutRequest r;
  r.key = key;
  r.size = size;
  if (tensor != nullptr) {
    r.tensor = FromProto(*tensor);
  }
  r.policy = FromProto(policy);
  r.request_id = request_id;
  return r;
}

void FillReservation(const PutGrant& g, std::uint64_t size, std::chrono::milliseconds ttl,
                     pb::Reservation* out) {
  out->set_reservation_id(g.put_id);
  out->set_size(size);
  out->set_ttl_ms(static_cast<std::uint64_t>(ttl.count()));
  for (const ReplicaLocation& loc : g.replicas) {
    ToProto(loc, out->add_replicas());
  }
}

}  // namespace

Status MasterCore::PutStart(const pb::PutStartRequest& req, pb::PutStartResponse* resp) {
  const auto start = MasterClock::now();
  PutRequest r = FromPutFields(req.key(), req.size(), req.has_tensor() ? &req.tensor() : nullptr,
                               req.policy(), req.request_id());
  r.replica_num = req.replica_num();
  r.preferred_node = req.preferred_node();
  r.client_endpoint = req.client_endpoint();
  // Bounded: a caller names at most a few nodes it could not reach.
  for (int i = 0; i < std::min(req.unreachable_size(), 16); ++i) {
    r.unreachable.push_back(req.unreachable(i));
  }
  Result<PutGrant> g = [&] {
    MutexLock lock(mu_);
    return state_.PutStart(r, MasterClock::now());
  }();
  if (g.ok()) {
    resp->set_put_id(g->put_id);
    for (const ReplicaLocation& loc : g->replicas) {
      ToProto(loc, resp->add_replicas());
    }
  }
  rpc_stats_.Record(RpcStats::kPutStart, start);
  return g.status();
}

void MasterCore::CommittedLocked(const std::string& key, const pb::ReserveNext* reserve,
                                 pb::Reservation* out, Finish* finish) {
  // The node learns of the commit now, so a master restart keeps the object.
  AnswerHeartbeatsLocked(MasterClock::now(), false, finish);
  auto it = waiters_.find(key);
  if (it != waiters_.end()) {
    for (Waiter& w : it->second) {
      finish->emplace_back(std::move(w.done), Status::Ok());
    }
    waiters_.erase(it);
  }
  if (reserve != nullptr && out != nullptr && reserve->size() > 0) {
    PutRequest r;
    r.size = reserve->size();
    r.replica_num = reserve->replica_num();
    r.preferred_node = reserve->preferred_node();
    r.client_endpoint = reserve->client_endpoint();
    // A declined offer is not an error: the next put takes two round trips.
    Result<PutGrant> g = state_.Reserve(r, MasterClock::now());
    if (g.ok()) {
      FillReservation(*g, r.size, options_.reservation_timeout, out);
    }
  }
}

void MasterCore::PutEnd(const pb::PutEndRequest* req, pb::PutEndResponse* resp, Done done) {
  const auto start = MasterClock::now();
  Finish finish;
  {
    MutexLock lock(mu_);
    const Status st = state_.PutEnd(req->key(), req->put_id(), MasterClock::now());
    if (st.ok()) {
      CommittedLocked(req->key(), req->has_reserve() ? &req->reserve() : nullptr,
                      resp->mutable_reservation(), &finish);
    }
    AnswerCommitLocked(req->key(), st, std::move(done), &finish);
  }
  rpc_stats_.Record(RpcStats::kPutEnd, start);
  Run(finish);
}

void MasterCore::PutReserved(const pb::PutReservedRequest* req, pb::PutReservedResponse* resp,
                             Done done) {
  const auto start = MasterClock::now();
  const PutRequest r =
      FromPutFields(req->key(), req->size(), req->has_tensor() ? &req->tensor() : nullptr,
                    req->policy(), req->request_id());
  Finish finish;
  {
    MutexLock lock(mu_);
    const Status st = state_.PutReserved(r, req->reservation_id(), MasterClock::now());
    if (st.ok()) {
      CommittedLocked(req->key(), req->has_reserve() ? &req->reserve() : nullptr,
                      resp->mutable_reservation(), &finish);
    }
    AnswerCommitLocked(req->key(), st, std::move(done), &finish);
  }
  rpc_stats_.Record(RpcStats::kPutReserved, start);
  Run(finish);
}

void MasterCore::AnswerCommitLocked(const std::string& key, const Status& st, Done done,
                                    Finish* finish) {
  if (st.ok() && options_.durable_commits && !stopping_) {
    std::vector<MasterState::CommitMark> marks = state_.CommitMarks(key);
    const bool acked = std::all_of(marks.begin(), marks.end(), [this](const auto& m) {
      mu_.AssertHeld();
      return state_.Acknowledged(m);
    });
    if (!acked) {
      parked_commits_.push_back(
          {std::move(marks), MasterClock::now() + options_.node_timeout, std::move(done)});
      return;
    }
  }
  finish->emplace_back(std::move(done), st);
}

void MasterCore::ResumeCommitsLocked(TimePoint now, bool all, Finish* finish) {
  for (auto it = parked_commits_.begin(); it != parked_commits_.end();) {
    const bool acked = std::all_of(it->marks.begin(), it->marks.end(), [this](const auto& m) {
      mu_.AssertHeld();
      return state_.Acknowledged(m);
    });
    if (!all && !acked && now < it->deadline) {
      ++it;
      continue;
    }
    if (!acked && !all) {
      SLUICE_LOG(warn, "a commit was not acknowledged by its store node within {} ms",
                 options_.node_timeout.count());
    }
    // Committed either way: a retry would find it so.
    finish->emplace_back(std::move(it->done), Status::Ok());
    it = parked_commits_.erase(it);
  }
}

Status MasterCore::Unreserve(const pb::UnreserveRequest& req) {
  if (req.reservation_ids_size() > 1024) {
    return InvalidArgumentError("Unreserve: at most 1024 reservation ids per call");
  }
  MutexLock lock(mu_);
  for (std::uint64_t id : req.reservation_ids()) {
    state_.Unreserve(id);
  }
  return Status::Ok();
}

Status MasterCore::PutRevoke(const pb::PutRevokeRequest& req) {
  const auto start = MasterClock::now();
  Status st;
  {
    MutexLock lock(mu_);
    st = state_.PutRevoke(req.key(), req.put_id());
  }
  rpc_stats_.Record(RpcStats::kPutRevoke, start);
  return st;
}

void MasterCore::GetStart(const pb::GetStartRequest* req, pb::GetStartResponse* resp, Done done,
                          bool allow_wait) {
  const auto start = MasterClock::now();
  MutexLock lock(mu_);
  Result<ReadGrant> g = state_.GetStart(req->key(), req->client_endpoint(), MasterClock::now());
  const StatusCode code = g.status().code();
  if (allow_wait && req->wait_ms() > 0 && !stopping_ &&
      (code == StatusCode::kNotFound || code == StatusCode::kFailedPrecondition)) {
    // Not committed yet: ask again once it is (or answer the timeout).
    const auto wait = std::chrono::milliseconds(std::min<std::uint64_t>(req->wait_ms(), 3600000));
    waiters_[req->key()].push_back(
        Waiter{[this, req, resp, done = std::move(done)](const Status& s) mutable {
                 if (!s.ok()) {
                   done(s);
                   return;
                 }
                 GetStart(req, resp, std::move(done), /*allow_wait=*/false);
               },
               MasterClock::now() + wait});
    return;
  }
  if (g.ok() && g->loading && stopping_) {
    g = Status(StatusCode::kCancelled, "master is shutting down");
  } else if (g.ok() && g->loading) {
    // On the disk tier: answer once the node has loaded it back.
    parked_gets_[req->key()].push_back(
        ParkedGet{req, resp, start, MasterClock::now() + kParkedGetTimeout, std::move(done)});
    return;
  }
  lock.Unlock();
  if (g.ok()) {
    FillGetStart(*g, resp);
  }
  rpc_stats_.Record(RpcStats::kGetStart, start);
  done(g.status());
}

Status MasterCore::RenewRead(const pb::RenewReadRequest& req) {
  MutexLock lock(mu_);
  return state_.RenewRead(req.key(), req.lease_id(), MasterClock::now());
}

Status MasterCore::GetEnd(const pb::GetEndRequest& req) {
  const auto start = MasterClock::now();
  Status st;
  Finish finish;
  {
    MutexLock lock(mu_);
    st = state_.GetEnd(req.key(), req.lease_id(), req.completed());
    AnswerHeartbeatsLocked(MasterClock::now(), false, &finish);  // Directory changes.
  }
  Run(finish);
  rpc_stats_.Record(RpcStats::kGetEnd, start);
  return st;
}

Status MasterCore::Remove(const pb::KeyRequest& req) {
  const auto start = MasterClock::now();
  Status st;
  Finish finish;
  {
    MutexLock lock(mu_);
    st = state_.Remove(req.key());
    AnswerHeartbeatsLocked(MasterClock::now(), false, &finish);  // Directory changes.
  }
  Run(finish);
  rpc_stats_.Record(RpcStats::kRemove, start);
  return st;
}

Status MasterCore::Exists(const pb::KeyRequest& req, pb::ExistsResponse* resp) {
  const auto start = MasterClock::now();
  {
    MutexLock lock(mu_);
    resp->set_exists(state_.Exists(req.key()));
  }
  rpc_stats_.Record(RpcStats::kExists, start);
  return Status::Ok();
}

void MasterCore::WaitFor(const pb::WaitForRequest& req, Done done) {
  if (req.key().empty() || req.key().size() > options_.max_key_bytes) {
    done(InvalidArgumentError("key must be 1.." + std::to_string(options_.max_key_bytes) +
                              " bytes"));
    return;
  }
  MutexLock lock(mu_);
  if (stopping_) {
    lock.Unlock();
    done(Status(StatusCode::kCancelled, "master is shutting down"));
    return;
  }
  if (state_.Exists(req.key())) {
    lock.Unlock();
    done(Status::Ok());
    return;
  }
  const auto timeout =
      std::chrono::milliseconds(std::min<std::uint64_t>(req.timeout_ms(), 3600000));
  waiters_[req.key()].push_back(Waiter{std::move(done), MasterClock::now() + timeout});
}

void MasterCore::FillGetStart(const ReadGrant& g, pb::GetStartResponse* resp) {
  resp->set_lease_id(g.lease_id);
  resp->set_size(g.meta.size);
  if (g.meta.tensor.has_value()) {
    ToProto(*g.meta.tensor, resp->mutable_tensor());
  }
  for (const ReplicaLocation& loc : g.replicas) {
    ToProto(loc, resp->add_replicas());
  }
}

void MasterCore::ResumeParkedGetsLocked(const std::vector<std::string>& keys, bool all,
                                        Finish* finish) {
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
          still.push_back(std::move(p));
          continue;
        }
        g = UnavailableError("object '" + key + "' was not loaded from disk in time",
                             FailureScope::kRequest);
      }
      if (g.ok()) {
        FillGetStart(*g, p.resp);
      }
      rpc_stats_.Record(RpcStats::kGetStart, p.start);
      finish->emplace_back(std::move(p.done), g.status());
    }
    if (still.empty()) {
      parked_gets_.erase(it);
    } else {
      it->second = std::move(still);
    }
  }
}

void MasterCore::TickLoop() {
  MutexLock lock(mu_);
  while (!stopping_) {
    cv_.WaitFor(lock, std::chrono::milliseconds(100));
    const TimePoint now = MasterClock::now();
    state_.Tick(now);
    Finish finish;
    ResumeParkedGetsLocked(state_.TakeLoaded(), /*all=*/!parked_gets_.empty(), &finish);
    AnswerHeartbeatsLocked(now, /*all=*/false, &finish);
    ResumeCommitsLocked(now, /*all=*/false, &finish);  // Lost nodes, deadlines.
    const std::vector<ObjectEvent> events = state_.TakeEvents();
    for (const ObjectEvent& e : events) {
      if (e.kind == ObjectEventKind::kLost) {
        SLUICE_LOG(warn, "object '{}' lost with its last replica", e.key);
      }
    }
    if (!events.empty() && sink_) {
      sink_(events);
    }
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      auto& ws = it->second;
      for (auto w = ws.begin(); w != ws.end();) {
        if (now >= w->deadline) {
          finish.emplace_back(std::move(w->done),
                              DeadlineExceededError("key '" + it->first + "' not complete in time",
                                                    FailureScope::kRequest));
          w = ws.erase(w);
        } else {
          ++w;
        }
      }
      it = ws.empty() ? waiters_.erase(it) : std::next(it);
    }
    if (!finish.empty()) {
      lock.Unlock();
      Run(finish);
      lock.Lock();
    }
  }
}

}  // namespace sluice::internal
