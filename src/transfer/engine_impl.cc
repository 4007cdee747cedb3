#include "transfer/engine_impl.h"

#include <sys/epoll.h>

#include <algorithm>

#include "common/log.h"
#include "common/mutex.h"
#include "transfer/tcp/acceptor.h"
#include "transfer/tcp/handshake.h"

namespace sluice::internal {
namespace {

constexpr std::uint64_t kShmChunk = std::uint64_t{4} << 20;

Status CheckConfig(const EngineConfig& c, bool* tcp, bool* shm) {
  *tcp = *shm = false;
  for (const std::string& t : c.transports) {
    if (t == "tcp") {
      *tcp = true;
    } else if (t == "shm") {
      *shm = true;
    } else {
      return InvalidArgumentError("config.transports: unknown transport '" + t +
                                  "' (want tcp, shm)");
    }
  }
  if (!*tcp && !*shm) {
    return InvalidArgumentError("config.transports: enable at least one of tcp, shm");
  }
  if (c.io_threads < 1 || c.io_threads > 64) {
    return InvalidArgumentError("config.io_threads must be in 1..64");
  }
  if (c.connections_per_peer < 1 || c.connections_per_peer > 64) {
    return InvalidArgumentError("config.connections_per_peer must be in 1..64");
  }
  if (c.slice_size < 4096 || c.slice_size > c.max_frame_payload) {
    return InvalidArgumentError("config.slice_size must be in 4 KiB..max_frame_payload");
  }
  if (c.max_frame_payload > (std::size_t{1} << 30)) {
    return InvalidArgumentError("config.max_frame_payload must be at most 1 GiB");
  }
  if (c.max_notify_bytes == 0 || c.max_notify_bytes > kMaxControlBody) {
    return InvalidArgumentError("config.max_notify_bytes must be in 1..1 MiB");
  }
  if (c.op_timeout.count() < 10 || c.connect_timeout.count() < 10) {
    return InvalidArgumentError("config.op_timeout and connect_timeout must be >= 10 ms");
  }
  return Status::Ok();
}

}  // namespace

struct EngineImpl::Plan {
  Peer* peer = nullptr;
  enum class Route : std::uint8_t { kTcp, kShm, kFail } route = Route::kTcp;
  Status failure;  // kFail: reported through the batch.
  std::shared_ptr<PeerMapping> mapping;
  char* mapped = nullptr;  // kShm through a mapping.
  std::int32_t pid = 0;    // kShm through process_vm.
  std::uint64_t remote_addr = 0;
  std::shared_ptr<Link> link;
};

EngineImpl::EngineImpl(const EngineConfig& config) : config_(config) {}

Result<std::unique_ptr<EngineImpl>> EngineImpl::Create(const EngineConfig& config) {
  std::unique_ptr<EngineImpl> e(new EngineImpl(config));
  SLUICE_RETURN_IF_ERROR(CheckConfig(config, &e->tcp_enabled_, &e->shm_enabled_));
  SLUICE_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(config.listen, true));
  std::uint16_t port = 0;
  SLUICE_ASSIGN_OR_RETURN(UniqueFd listen_fd, Listen(hp, &port));
  hp.port = port;
  e->endpoint_ = hp.ToString();
  for (int i = 0; i < config.io_threads; ++i) {
    SLUICE_ASSIGN_OR_RETURN(auto loop, EventLoop::Create("sluice-io-" + std::to_string(i)));
    e->loops_.push_back(std::move(loop));
  }
  if (e->shm_enabled_) {
    e->copy_pool_ = std::make_unique<CopyPool>(config.io_threads);
  }
  EngineImpl* self = e.get();
  e->loops_[0]->Add(std::make_shared<Acceptor>(std::move(listen_fd),
                                               [self](UniqueFd fd, std::string peer) {
                                                 self->Accept(std::move(fd), std::move(peer));
                                               }),
                    EPOLLIN);
  SLUICE_LOG(info, "transfer engine listening on {} (tcp={}, shm={}, io_threads={})", e->endpoint_,
             e->tcp_enabled_, e->shm_enabled_, config.io_threads);
  return e;
}

EngineImpl::~EngineImpl() {
  for (auto& loop : loops_) {
    loop->Stop();  // Fails pending tcp work with kCancelled.
  }
  copy_pool_.reset();  // Finishes running copies, cancels queued ones.
}

void EngineImpl::Accept(UniqueFd fd, std::string peer) {
  EventLoop* loop = loops_[next_loop_.fetch_add(1) % loops_.size()].get();
  ServerSession::Start(std::move(fd), loop, std::move(peer), config_.op_timeout, this);
}

Result<RegionKey> EngineImpl::RegisterMemory(void* addr, std::size_t len, MemoryKind kind,
                                             Access access) {
  if (kind == MemoryKind::kDevice) {
    return UnimplementedError(
        "RegisterMemory: device memory needs a device-capable transport; this build has tcp "
        "and shm only");
  }
  SLUICE_ASSIGN_OR_RETURN(RegionKey key,
                          regions_.Add(addr, len, kind, access, allocator_.Find(addr, len)));
  if (access != Access::kLocalOnly) {
    PushTable();
  }
  return key;
}

Status EngineImpl::UnregisterMemory(RegionKey key) {
  SLUICE_RETURN_IF_ERROR(regions_.Remove(key));
  PushTable();
  return Status::Ok();
}

Result<SharedBuffer> EngineImpl::AllocateShared(std::size_t len) {
  SLUICE_ASSIGN_OR_RETURN(auto alloc, allocator_.Allocate(len));
  return SharedBuffer(std::move(alloc));
}

HelloOk EngineImpl::MakeHelloOk() {
  return HelloOk{HostInfo::Self(), regions_.Snapshot()};
}

void EngineImpl::PushTable() {
  auto encoded = std::make_shared<const std::string>(EncodeTable(regions_.Snapshot()));
  MutexLock lock(subs_mu_);
  for (auto it = subscribers_.begin(); it != subscribers_.end();) {
    if (auto s = it->lock()) {
      s->PushTable(encoded);
      ++it;
    } else {
      it = subscribers_.erase(it);
    }
  }
}

void EngineImpl::Subscribe(const std::shared_ptr<ServerSession>& s) {
  MutexLock lock(subs_mu_);
  subscribers_.push_back(s);
}

void EngineImpl::Unsubscribe(ServerSession* s) {
  MutexLock lock(subs_mu_);
  std::erase_if(subscribers_, [s](const std::weak_ptr<ServerSession>& w) {
    auto p = w.lock();
    return p == nullptr || p.get() == s;
  });
}

void EngineImpl::SetNotifyHandler(NotifyHandler handler) {
  auto h = handler ? std::make_shared<NotifyHandler>(std::move(handler)) : nullptr;
  MutexLock lock(handler_mu_);
  notify_handler_ = std::move(h);
}

void EngineImpl::DeliverNotify(const std::string& sender, std::span<const std::byte> data) {
  std::shared_ptr<NotifyHandler> h;
  {
    MutexLock lock(handler_mu_);
    h = notify_handler_;
  }
  if (h != nullptr) {
    (*h)(NotifyMessage{sender, data});
  }
}

Result<Peer*> EngineImpl::FindPeer(SegmentId id) const {
  ReaderLock lock(peers_mu_);
  if (id.value == 0 || id.value > peers_.size()) {
    return InvalidArgumentError("unknown segment id " + std::to_string(id.value) +
                                " (open it with OpenSegment)");
  }
  return peers_[id.value - 1].get();
}

Result<SegmentId> EngineImpl::OpenSegment(std::string_view endpoint) {
  SLUICE_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(endpoint, false));
  const std::string name = hp.ToString();
  Peer* peer = nullptr;
  {
    WriterLock lock(peers_mu_);
    auto it = peer_index_.find(name);
    if (it == peer_index_.end()) {
      const SegmentId id{peers_.size() + 1};
      peers_.push_back(std::make_unique<Peer>(id, name, hp));
      it = peer_index_.emplace(name, peers_.size() - 1).first;
    }
    peer = peers_[it->second].get();
  }
  MutexLock open_lock(peer->open_mu());
  std::shared_ptr<Link> link = peer->link();
  if (link == nullptr || !link->alive->load(std::memory_order_acquire)) {
    SLUICE_RETURN_IF_ERROR(Connect(peer));
  }
  return peer->id();
}

Status EngineImpl::Connect(Peer* peer) {
  auto link = std::make_shared<Link>();
  RegionTable table;
  std::vector<UniqueFd> fds;
  for (int i = 0; i < config_.connections_per_peer; ++i) {
    Result<HandshakeResult> hs = ClientHandshake(peer->host_port(), config_.secret, endpoint_,
                                                 i == 0, config_.connect_timeout);
    if (!hs.ok()) {
      return hs.status();
    }
    if (i == 0) {
      table = std::move(hs->hello.table);
      if (shm_enabled_) {
        link->shm = ShmPeer::Probe(hs->hello.host);
      }
    }
    fds.push_back(std::move(hs->fd));
  }
  std::weak_ptr<Link> weak = link;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    ClientSession::Callbacks cb;
    cb.on_closed = [peer, weak](const Status& why) {
      if (auto l = weak.lock()) {
        peer->LinkDown(l, why);
      }
    };
    if (i == 0) {
      cb.on_table = [peer](RegionTable t) { peer->UpdateTable(std::move(t)); };
    }
    EventLoop* loop = loops_[(peer->id().value + i) % loops_.size()].get();
    link->conns.push_back(std::make_shared<ClientSession>(std::move(fds[i]), loop, peer->endpoint(),
                                                          config_.op_timeout, std::move(cb)));
  }
  peer->SetLink(link, std::move(table));
  for (auto& c : link->conns) {
    c->Begin();
  }
  SLUICE_LOG(debug, "opened segment {} ({} connections, shm={}, process_vm={})", peer->endpoint(),
             link->conns.size(), link->shm != nullptr, link->shm != nullptr && link->shm->vm_ok());
  return Status::Ok();
}

Result<std::vector<RegionInfo>> EngineImpl::SegmentRegions(SegmentId segment) const {
  SLUICE_ASSIGN_OR_RETURN(Peer * peer, FindPeer(segment));
  return peer->Regions();
}

namespace {

// Where [offset, offset + length) of `region` lies in `m`, the mapping of
// its allocation; kUnavailable when the peer's table points outside it (a
// peer's table is input: never trust its offsets).
Result<char*> MappedRange(const PeerMapping& m, const WireRegion& region, std::uint64_t offset,
                          std::uint64_t length, const std::string& endpoint) {
  if (region.memfd_offset > m.size || offset > m.size - region.memfd_offset ||
      length > m.size - region.memfd_offset - offset) {
    return UnavailableError(
        "peer " + endpoint + "'s region table points outside its shared allocation",
        FailureScope::kEndpoint);
  }
  return m.addr + region.memfd_offset + offset;
}

}  // namespace

Result<PeerMemory> EngineImpl::MapPeerMemory(SegmentId segment, RegionKey key, std::uint64_t offset,
                                             std::uint64_t length) {
  if (length == 0) {
    return InvalidArgumentError("MapPeerMemory: length must be > 0");
  }
  SLUICE_ASSIGN_OR_RETURN(Peer * peer, FindPeer(segment));
  std::shared_ptr<Link> link = peer->link();
  if (link == nullptr || !link->alive->load(std::memory_order_acquire)) {
    return UnavailableError("peer " + peer->endpoint() + " is down", FailureScope::kEndpoint);
  }
  if (!shm_enabled_ || link->shm == nullptr) {
    return FailedPreconditionError("peer " + peer->endpoint() +
                                   (shm_enabled_ ? " is not on this host" : ": shm is disabled") +
                                   "; read its memory with Submit");
  }
  WireRegion region;
  if (!peer->FindRegion(key.value, &region)) {
    return NotFoundError("no region " + std::to_string(key.value) + " on " + peer->endpoint());
  }
  const RegionInfo& info = region.info;
  SLUICE_RETURN_IF_ERROR(CheckRange(info.length, info.access, offset, length, /*write=*/false));
  if (!info.shared) {
    return FailedPreconditionError("region " + std::to_string(key.value) + " on " +
                                   peer->endpoint() +
                                   " is not a shared allocation; read it with Submit");
  }
  SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<PeerMapping> m, link->shm->Map(region));
  SLUICE_ASSIGN_OR_RETURN(const char* at,
                          MappedRange(*m, region, offset, length, peer->endpoint()));
  PeerMemory out;
  out.data = at;
  out.length = length;
  out.keep = std::move(m);
  return out;
}

Status EngineImpl::PlanOp(const TransferRequest& op, Peer* peer, const Link& link,
                          Plan* plan) const {
  const bool shm_ok = shm_enabled_ && link.shm != nullptr;
  if (op.hint == TransportHint::kShm && !shm_ok) {
    return FailedPreconditionError("shm cannot reach " + peer->endpoint() +
                                   (shm_enabled_ ? " (not on this host)" : " (shm disabled)"));
  }
  if (op.hint == TransportHint::kTcp && !tcp_enabled_) {
    return FailedPreconditionError("tcp is disabled in this engine's config");
  }
  plan->route = Plan::Route::kTcp;
  if (op.hint == TransportHint::kTcp || !shm_ok) {
    if (!tcp_enabled_) {
      return FailedPreconditionError("no enabled transport reaches " + peer->endpoint());
    }
    return Status::Ok();
  }
  WireRegion region;
  if (peer->FindRegion(op.remote_key.value, &region)) {
    const RegionInfo& info = region.info;
    Status range = CheckRange(info.length, info.access, op.remote_offset, op.length,
                              op.kind == OpKind::kWrite);
    if (!range.ok()) {
      plan->route = Plan::Route::kFail;
      plan->failure = std::move(range);
      return Status::Ok();
    }
    Result<std::shared_ptr<PeerMapping>> m =
        info.shared ? link.shm->Map(region) : Result<std::shared_ptr<PeerMapping>>(nullptr);
    if (m.ok() && *m != nullptr) {
      Result<char*> at = MappedRange(**m, region, op.remote_offset, op.length, peer->endpoint());
      if (!at.ok()) {
        plan->route = Plan::Route::kFail;
        plan->failure = at.status();
        return Status::Ok();
      }
      plan->route = Plan::Route::kShm;
      plan->mapping = *m;
      plan->mapped = *at;
      return Status::Ok();
    }
    if (link.shm->vm_ok()) {
      plan->route = Plan::Route::kShm;
      plan->pid = link.shm->pid();
      plan->remote_addr = info.addr + op.remote_offset;
      return Status::Ok();
    }
  }
  if (op.hint == TransportHint::kShm || !tcp_enabled_) {
    // Unknown key, or memory shm cannot reach: only tcp's target-side check
    // could say more, and tcp is not allowed here.
    plan->route = Plan::Route::kFail;
    plan->failure = NotFoundError("no shm path to key " + std::to_string(op.remote_key.value) +
                                  " on " + peer->endpoint());
  }
  return Status::Ok();
}

Result<std::shared_ptr<TransferBatch>> EngineImpl::Submit(std::span<const TransferRequest> ops,
                                                          BatchCallback callback) {
  if (ops.empty()) {
    return InvalidArgumentError("Submit: empty batch");
  }
  std::vector<Plan> plans(ops.size());
  auto batch = BatchState::Create(ops.size(), std::move(callback), loops_[0].get());
  auto unpin_all = [&] {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (batch->op(i).region != nullptr) {
        RegionTableLocal::Unpin(batch->op(i).region);
        batch->op(i).region = nullptr;
      }
    }
  };
  std::uint64_t units = 0;
  Peer* last_peer = nullptr;
  std::shared_ptr<Link> last_link;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const TransferRequest& op = ops[i];
    Status s;
    if (op.length == 0 || op.local == nullptr) {
      s = InvalidArgumentError("op " + std::to_string(i) + ": null buffer or zero length");
    } else if (op.remote_offset + op.length < op.remote_offset) {
      s = InvalidArgumentError("op " + std::to_string(i) + ": remote range wraps");
    } else if (last_peer == nullptr || last_peer->id() != op.segment) {
      Result<Peer*> p = FindPeer(op.segment);
      if (p.ok()) {
        last_peer = *p;
        last_link = last_peer->link();
      } else {
        s = p.status();
      }
    }
    if (s.ok() && (last_link == nullptr || !last_link->alive->load(std::memory_order_acquire))) {
      s = UnavailableError(
          "peer " + last_peer->endpoint() + " is down; reopen the segment to reconnect",
          FailureScope::kEndpoint);
    }
    if (s.ok()) {
      plans[i].peer = last_peer;
      plans[i].link = last_link;
      s = PlanOp(op, last_peer, *last_link, &plans[i]);
    }
    if (s.ok()) {
      Result<LocalRegion*> r = regions_.PinLocal(op.local, op.length);
      if (r.ok()) {
        batch->op(i).region = *r;
      } else {
        s = r.status();
      }
    }
    if (!s.ok()) {
      unpin_all();
      return s.WithContext("Submit op " + std::to_string(i));
    }
    const std::uint64_t chunk = plans[i].route == Plan::Route::kShm   ? kShmChunk
                                : plans[i].route == Plan::Route::kTcp ? config_.slice_size
                                                                      : op.length;
    const std::uint64_t n = (op.length + chunk - 1) / chunk;
    batch->op(i).units.store(static_cast<std::uint32_t>(n), std::memory_order_relaxed);
    units += n;
  }

  batch->Arm(units, batch);
  std::vector<CopyJob> jobs;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const TransferRequest& op = ops[i];
    Plan& plan = plans[i];
    const auto idx = static_cast<std::uint32_t>(i);
    if (op.kind == OpKind::kWrite) {
      batch->op(i).order = &plan.peer->order();
      batch->op(i).epoch = plan.peer->order().BeginWrite();
    }
    char* local = static_cast<char*>(op.local);
    switch (plan.route) {
      case Plan::Route::kFail:
        batch->UnitDone(idx, plan.failure);
        break;
      case Plan::Route::kShm:
        for (std::uint64_t off = 0; off < op.length; off += kShmChunk) {
          CopyJob j;
          j.batch = batch.get();
          j.op_index = idx;
          j.write = op.kind == OpKind::kWrite;
          j.local = local + off;
          j.mapping = plan.mapping;
          j.mapped = plan.mapped != nullptr ? plan.mapped + off : nullptr;
          j.pid = plan.pid;
          j.remote_addr = plan.remote_addr + off;
          j.length = std::min(kShmChunk, op.length - off);
          j.peer_alive = plan.link->alive;
          jobs.push_back(std::move(j));
        }
        break;
      case Plan::Route::kTcp: {
        const auto& conns = plan.link->conns;
        for (std::uint64_t off = 0; off < op.length; off += config_.slice_size) {
          Slice s{batch.get(),
                  idx,
                  op.kind,
                  local + off,
                  op.remote_key.value,
                  op.remote_offset + off,
                  std::min<std::uint64_t>(config_.slice_size, op.length - off)};
          Status st = conns[plan.peer->NextConn() % conns.size()]->Enqueue(s);
          if (!st.ok()) {
            batch->UnitDone(idx, st);
          }
        }
        break;
      }
    }
  }
  if (!jobs.empty()) {
    copy_pool_->Submit(jobs);
  }
  batch->ReleaseGuard();
  return std::shared_ptr<TransferBatch>(batch, batch.get());
}

Status EngineImpl::Notify(SegmentId segment, std::span<const std::byte> data) {
  if (data.empty() || data.size() > config_.max_notify_bytes) {
    return InvalidArgumentError("Notify: message must be 1.." +
                                std::to_string(config_.max_notify_bytes) + " bytes");
  }
  SLUICE_ASSIGN_OR_RETURN(Peer * peer, FindPeer(segment));
  std::shared_ptr<Link> link = peer->link();
  if (link == nullptr || !link->alive->load(std::memory_order_acquire)) {
    return UnavailableError("peer " + peer->endpoint() + " is down", FailureScope::kEndpoint);
  }
  peer->order().Notify(std::string(reinterpret_cast<const char*>(data.data()), data.size()));
  return Status::Ok();
}

}  // namespace sluice::internal
