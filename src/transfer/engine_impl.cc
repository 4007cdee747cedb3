#include "transfer/engine_impl.h"

#include <sys/epoll.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "common/log.h"
#include "common/mutex.h"
#include "device/backends.h"
#include "transfer/batch.h"
#include "transfer/control/acceptor.h"
#include "transfer/control/handshake.h"

namespace sluice::internal {
namespace {

std::string_view KindName(MemoryKind k) {
  return k == MemoryKind::kDevice ? "device" : "host";
}

Status CheckConfig(const EngineConfig& c) {
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
  if (c.handshake_timeout.count() < 10) {
    return InvalidArgumentError("config.handshake_timeout must be >= 10 ms");
  }
  if (c.max_pending_handshakes < 1 || c.max_pending_handshakes > 65536) {
    return InvalidArgumentError("config.max_pending_handshakes must be in 1..65536");
  }
  if (c.encrypt_data && c.secret.empty()) {
    return InvalidArgumentError(
        "config.encrypt_data needs config.secret (the keys come from it): give the cluster token");
  }
  return Status::Ok();
}

}  // namespace

struct EngineImpl::Plan {
  Peer* peer = nullptr;
  std::shared_ptr<Link> link;
  Status failure;  // The route's path is null: the op fails through the batch with this.
};

EngineImpl::EngineImpl(const EngineConfig& config) : config_(config) {}

Result<std::unique_ptr<EngineImpl>> EngineImpl::Create(const EngineConfig& config) {
  std::unique_ptr<EngineImpl> e(new EngineImpl(config));
  SLUICE_RETURN_IF_ERROR(CheckConfig(config));
  SLUICE_RETURN_IF_ERROR(CheckHostIdEnvironment());
  if (!config.device.empty()) {
    Result<device::DeviceBackend*> b = device::ProcessBackend(config.device);
    if (!b.ok()) {
      return Status(b.status().code(), "config.device: " + std::string(b.status().message()),
                    b.status().scope());
    }
    e->backend_ = *b;
  }
  // In the order their paths are tried (the factory table's rank).
  SLUICE_ASSIGN_OR_RETURN(e->transports_, MakeTransports(config, e->backend_));
  for (const TransportFactory& f : TransportFactories()) {
    if (f.serve != nullptr) {
      auto& s = e->served_.emplace_back(std::make_unique<Served>());
      s->factory = &f;
      s->ctx =
          ServeContext{&e->regions_,      e->backend_, config.slice_size, config.max_frame_payload,
                       config.op_timeout, &s->read,    &s->written};
    }
  }
  std::string names;
  for (const auto& t : e->transports_) {
    if (!t->caps().completion_means_visible) {
      return InternalError("transport " + std::string(t->name()) +
                           " cannot order writes before notifies");
    }
    e->local_kinds_ |= t->caps().local_kinds;
    names += (names.empty() ? "" : ",") + std::string(t->name());
  }
  SLUICE_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(config.listen, true));
  std::uint16_t port = 0;
  SLUICE_ASSIGN_OR_RETURN(UniqueFd listen_fd, Listen(hp, &port));
  hp.port = port;
  SLUICE_ASSIGN_OR_RETURN(e->endpoint_, AdvertisedEndpoint(hp, config.advertise, "advertise"));
  for (int i = 0; i < config.io_threads; ++i) {
    SLUICE_ASSIGN_OR_RETURN(auto loop, EventLoop::Create("sluice-io-" + std::to_string(i)));
    e->loops_.push_back(std::move(loop));
  }
  EngineImpl* self = e.get();
  e->loops_[0]->Add(std::make_shared<Acceptor>(std::move(listen_fd),
                                               [self](UniqueFd fd, std::string peer) {
                                                 self->Accept(std::move(fd), std::move(peer));
                                               }),
                    EPOLLIN);
  SLUICE_LOG(info, "transfer engine listening on {} (transports={}, io_threads={})", e->endpoint_,
             names, config.io_threads);
  return e;
}

EngineImpl::~EngineImpl() {
  for (auto& loop : loops_) {
    loop->Stop();  // Fails pending tcp work with kCancelled.
  }
  transports_.clear();  // Finishes running copies, cancels queued ones.
}

void EngineImpl::Accept(UniqueFd fd, std::string peer) {
  // Only loop 0 accepts, so the check and the increment do not race with
  // another accept (sessions end on any loop: the count is atomic).
  if (pending_handshakes_.load() >= config_.max_pending_handshakes) {
    refusals_.Refused(peer, "too many connections in their handshake (" +
                                std::to_string(config_.max_pending_handshakes) + ")");
    return;  // `fd` closes here.
  }
  pending_handshakes_.fetch_add(1);
  EventLoop* loop = loops_[next_loop_.fetch_add(1) % loops_.size()].get();
  ServerConn::Start(std::move(fd), loop, std::move(peer), config_.op_timeout, this);
}

std::vector<std::unique_ptr<ConnHalf>> EngineImpl::ServedHalves(ConnPort* conn) {
  std::vector<std::unique_ptr<ConnHalf>> halves;
  for (const auto& s : served_) {
    halves.push_back(s->factory->serve(conn, s->ctx));
  }
  return halves;
}

Result<RegionKey> EngineImpl::RegisterMemory(void* addr, std::size_t len, MemoryKind kind,
                                             Access access, int device) {
  if (kind == MemoryKind::kDevice && backend_ == nullptr) {
    return UnimplementedError(
        "RegisterMemory: device memory needs a device backend (EngineConfig::device: sim or "
        "cuda)");
  }
  if ((local_kinds_ & KindBit(kind)) == 0) {
    return UnimplementedError("RegisterMemory: no enabled transport moves " +
                              std::string(KindName(kind)) + " memory");
  }
  if (addr == nullptr || len == 0) {
    return InvalidArgumentError("RegisterMemory: address must be non-null and length > 0");
  }
  if (kind == MemoryKind::kDevice) {
    SLUICE_ASSIGN_OR_RETURN(device, DescribeDevice(addr, len, device));
  } else {
    if (device != -1) {
      return InvalidArgumentError("RegisterMemory: host memory takes no device (got " +
                                  std::to_string(device) + ")");
    }
    if (backend_ != nullptr) {
      Result<device::PointerInfo> info = backend_->Attributes(addr);
      if (info.ok() && info->kind == MemoryKind::kDevice) {
        return InvalidArgumentError("RegisterMemory: this is " + std::string(backend_->name()) +
                                    " device memory (device " + std::to_string(info->device) +
                                    "); register it as MemoryKind::kDevice");
      }
    }
  }
  std::shared_ptr<SharedAllocation> shared = allocator_.Find(addr, len);
  RegionPublished published;
  if (access != Access::kLocalOnly) {
    SLUICE_ASSIGN_OR_RETURN(published, Publish(RegionView{static_cast<char*>(addr), len, kind,
                                                          access, device, shared.get()}));
  }
  SLUICE_ASSIGN_OR_RETURN(RegionKey key, regions_.Add(addr, len, kind, access, std::move(shared),
                                                      device, std::move(published)));
  if (access != Access::kLocalOnly) {
    PushTable();
  }
  return key;
}

Result<int> EngineImpl::DescribeDevice(void* addr, std::size_t len, int device) const {
  SLUICE_ASSIGN_OR_RETURN(device::PointerInfo info, backend_->Attributes(addr));
  const std::string backend(backend_->name());
  if (info.kind != MemoryKind::kDevice) {
    return InvalidArgumentError("RegisterMemory: not " + backend +
                                " device memory (register host memory as MemoryKind::kHost)");
  }
  if (device != -1 && device != info.device) {
    return InvalidArgumentError("RegisterMemory: the memory is on device " +
                                std::to_string(info.device) + ", not device " +
                                std::to_string(device));
  }
  const std::uint64_t offset =
      reinterpret_cast<std::uintptr_t>(addr) - reinterpret_cast<std::uintptr_t>(info.base);
  if (info.length != 0 && len > info.length - offset) {  // 0: the backend cannot say.
    return InvalidArgumentError("RegisterMemory: " + std::to_string(len) + " bytes at offset " +
                                std::to_string(offset) + " run past the " +
                                std::to_string(info.length) + "-byte device allocation");
  }
  return info.device;
}

Result<RegionPublished> EngineImpl::Publish(const RegionView& region) const {
  RegionPublished out;
  for (const auto& t : transports_) {
    Result<RegionAccess> a = t->PackRegion(region);
    if (!a.ok()) {
      return a.status().WithContext("RegisterMemory: transport " + std::string(t->name()));
    }
    if (a->bytes.size() > kMaxAccessBlob) {
      return InternalError("RegisterMemory: transport " + std::string(t->name()) + " packed " +
                           std::to_string(a->bytes.size()) + " bytes for a region (at most " +
                           std::to_string(kMaxAccessBlob) + ")");
    }
    if (!a->bytes.empty()) {
      out.access.push_back(AccessBlob{std::string(t->name()), std::move(a->bytes)});
    }
    if (a->hold != nullptr) {
      out.holds.push_back(std::move(a->hold));
    }
  }
  return out;
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
  HelloOk ok;  // The session adds its MAC.
  ok.host = HostInfo::Self();
  ok.table = regions_.Snapshot();
  for (const auto& t : transports_) {
    if (std::string blob = t->LinkBlob(); !blob.empty()) {
      ok.links.push_back(AccessBlob{std::string(t->name()), std::move(blob)});
    }
  }
  return ok;
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

void EngineImpl::Subscribe(const std::shared_ptr<ServerConn>& c) {
  MutexLock lock(subs_mu_);
  subscribers_.push_back(c);
}

void EngineImpl::Unsubscribe(ServerConn* c) {
  MutexLock lock(subs_mu_);
  std::erase_if(subscribers_, [c](const std::weak_ptr<ServerConn>& w) {
    auto p = w.lock();
    return p == nullptr || p.get() == c;
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
  HostInfo host;
  std::vector<AccessBlob> links;
  std::vector<UniqueFd> fds;
  std::vector<std::unique_ptr<FrameSeal>> seals;
  for (int i = 0; i < config_.connections_per_peer; ++i) {
    Result<HandshakeResult> hs =
        ClientHandshake(peer->host_port(), config_.secret, endpoint_, i == 0, config_.encrypt_data,
                        config_.connect_timeout);
    if (!hs.ok()) {
      return hs.status();
    }
    if (i == 0) {
      table = std::move(hs->hello.table);
      host = hs->hello.host;
      links = std::move(hs->hello.links);
    }
    fds.push_back(std::move(hs->fd));
    seals.push_back(std::move(hs->seal));
  }
  std::weak_ptr<Link> weak = link;
  // The halves of the transport riding the connections (at most one).
  const Transport* riding = nullptr;
  std::vector<ConnHalf*> halves;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    ClientConn::Callbacks cb;
    cb.on_closed = [peer, weak](const Status& why) {
      if (auto l = weak.lock()) {
        peer->LinkDown(l, why);
      }
    };
    if (i == 0) {
      cb.on_table = [peer](RegionTable t) { peer->UpdateTable(std::move(t)); };
    }
    EventLoop* loop = loops_[(peer->id().value + i) % loops_.size()].get();
    auto conn =
        std::make_shared<ClientConn>(std::move(fds[i]), loop, peer->endpoint(), config_.op_timeout,
                                     std::move(cb), std::move(seals[i]));
    for (const auto& t : transports_) {
      if (std::unique_ptr<ConnHalf> half = t->ClientHalf(conn.get())) {
        if (riding != nullptr && riding != t.get()) {
          return InternalError("transports " + std::string(riding->name()) + " and " +
                               std::string(t->name()) + " both ride the connections");
        }
        riding = t.get();
        halves.push_back(half.get());
        conn->SetHalf(std::move(half));
      }
    }
    link->conns.push_back(std::move(conn));
  }
  std::string names;
  for (const auto& t : transports_) {
    const std::string* blob = FindBlob(links, t->name());
    const PeerLinkInfo info{
        peer->endpoint(), host, blob != nullptr ? *blob : std::string_view(),
        t.get() == riding ? std::span<ConnHalf* const>(halves) : std::span<ConnHalf* const>(),
        link->alive};
    if (auto path = t->Attach(info)) {
      link->paths.push_back(std::move(path));
      names += (names.empty() ? "" : ",") + std::string(t->name());
    }
  }
  peer->SetLink(link, std::move(table));
  for (auto& c : link->conns) {
    c->Begin();
  }
  SLUICE_LOG(debug, "opened segment {} ({} connections, paths: {})", peer->endpoint(),
             link->conns.size(), names.empty() ? "none" : names);
  return Status::Ok();
}

Result<std::vector<RegionInfo>> EngineImpl::SegmentRegions(SegmentId segment) const {
  SLUICE_ASSIGN_OR_RETURN(Peer * peer, FindPeer(segment));
  return peer->Regions();
}

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
  auto it = std::find_if(link->paths.begin(), link->paths.end(),
                         [](const auto& p) { return p->transport().caps().maps; });
  if (it == link->paths.end()) {
    return FailedPreconditionError(
        "peer " + peer->endpoint() +
        " cannot be mapped from here (no enabled transport that maps reaches it: it is on "
        "another host, or none is enabled); read its memory with Submit");
  }
  std::shared_ptr<const WireRegion> region = peer->FindRegion(key.value);
  if (region == nullptr) {
    return NotFoundError("no region " + std::to_string(key.value) + " on " + peer->endpoint());
  }
  SLUICE_RETURN_IF_ERROR(
      CheckRange(region->info.length, region->info.access, offset, length, /*write=*/false));
  return (*it)->Map(*region, offset, length);
}

Status EngineImpl::PlanOp(const TransferRequest& op, MemoryKind local_kind, Peer* peer,
                          const Link& link, Plan* plan, OpRoute* route) const {
  const bool same_host_only = op.hint == TransportHint::kSameHostOnly;
  const bool any = std::any_of(link.paths.begin(), link.paths.end(), [&](const auto& p) {
    return !same_host_only || p->transport().caps().same_host_only;
  });
  if (!any) {
    return FailedPreconditionError("no enabled transport" +
                                   std::string(same_host_only ? " that stays on this host" : "") +
                                   " reaches " + peer->endpoint());
  }
  // The peer's table entry, looked up once and only for a path that reads it.
  std::shared_ptr<const WireRegion> region;
  bool looked_up = false;
  bool known = false;
  bool kinds_ok = false;
  for (const auto& path : link.paths) {
    const TransportCaps& caps = path->transport().caps();
    if ((same_host_only && !caps.same_host_only) || (caps.local_kinds & KindBit(local_kind)) == 0) {
      continue;
    }
    if (caps.reads_peer_table && !looked_up) {
      looked_up = true;
      region = peer->FindRegion(op.remote_key.value);
      known = region != nullptr;
    }
    if (known && (caps.remote_kinds & KindBit(region->info.kind)) == 0) {
      continue;
    }
    kinds_ok = true;
    const OpQuery q{op, local_kind, caps.reads_peer_table && known ? region.get() : nullptr};
    Status failure;
    switch (path->Plan(q, route, &failure)) {
      case PlanVerdict::kTake:
        route->path = path.get();
        return Status::Ok();
      case PlanVerdict::kFail:
        *route = OpRoute{};
        plan->failure = std::move(failure);
        return Status::Ok();
      case PlanVerdict::kPass:
        *route = OpRoute{};
        break;
    }
  }
  // Failed through the batch, like a failure the target reports.
  if (!looked_up) {
    region = peer->FindRegion(op.remote_key.value);
    known = region != nullptr;
  }
  if (known && !kinds_ok) {
    plan->failure = FailedPreconditionError(
        "no enabled transport" + std::string(same_host_only ? " that stays on this host" : "") +
        " moves " + std::string(KindName(local_kind)) + " memory to " +
        std::string(KindName(region->info.kind)) + " region " +
        std::to_string(op.remote_key.value) + " on " + peer->endpoint());
  } else {
    plan->failure = NotFoundError("no path to key " + std::to_string(op.remote_key.value) + " on " +
                                  peer->endpoint() +
                                  (known ? "" : " (not in its region table as last pushed)"));
  }
  return Status::Ok();
}

Result<std::shared_ptr<TransferBatch>> EngineImpl::Submit(std::span<const TransferRequest> ops,
                                                          BatchCallback callback) {
  if (ops.empty()) {
    return InvalidArgumentError("Submit: empty batch");
  }
  std::vector<Plan> plans(ops.size());
  std::vector<OpRoute> routes(ops.size());
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
      Result<LocalRegion*> r = regions_.PinLocal(op.local, op.length);
      if (r.ok()) {
        batch->op(i).region = *r;
      } else {
        s = r.status();
      }
    }
    if (s.ok()) {
      plans[i].peer = last_peer;
      plans[i].link = last_link;
      s = PlanOp(op, batch->op(i).region->kind, last_peer, *last_link, &plans[i], &routes[i]);
    }
    if (!s.ok()) {
      unpin_all();
      return s.WithContext("Submit op " + std::to_string(i));
    }
    const std::uint64_t unit = routes[i].path != nullptr ? routes[i].unit : op.length;
    const std::uint64_t n = (op.length + unit - 1) / unit;
    batch->op(i).units.store(static_cast<std::uint32_t>(n), std::memory_order_relaxed);
    units += n;
  }

  batch->Arm(units, batch);
  // The distinct paths of this batch (at most one per transport), each of
  // which posts its share of the batch at once.
  std::array<TransportPath*, kMaxTransports> used{};
  std::size_t n_used = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const TransferRequest& op = ops[i];
    Plan& plan = plans[i];
    const auto idx = static_cast<std::uint32_t>(i);
    if (op.kind == OpKind::kWrite) {
      batch->op(i).order = &plan.peer->order();
      batch->op(i).epoch = plan.peer->order().BeginWrite();
    }
    TransportPath* path = routes[i].path;
    if (path == nullptr) {
      batch->UnitDone(idx, plan.failure);
      continue;
    }
    path->transport().Count(op.kind, op.length);
    if (std::find(used.begin(), used.begin() + n_used, path) == used.begin() + n_used) {
      used[n_used++] = path;
    }
  }
  for (std::size_t k = 0; k < n_used; ++k) {
    used[k]->Post(batch.get(), ops, routes);
  }
  batch->ReleaseGuard();
  return std::shared_ptr<TransferBatch>(batch, batch.get());
}

std::vector<TransportStats> EngineImpl::TransportCounters() const {
  std::vector<TransportStats> out;
  for (const auto& t : transports_) {
    out.push_back(t->Stats());
    for (const auto& s : served_) {
      if (s->factory->name == t->name()) {
        out.back().bytes_served_read = s->read.load(std::memory_order_relaxed);
        out.back().bytes_served_written = s->written.load(std::memory_order_relaxed);
      }
    }
  }
  return out;
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
