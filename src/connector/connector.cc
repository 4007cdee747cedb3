#include <cstdlib>
#include <regex>

#include "common/log.h"
#include "common/mutex.h"
#include "common/random.h"
#include "connector/connector_impl.h"

namespace sluice {
namespace internal {

std::vector<std::function<void()>> HandleState::CompleteLocked(Status s) {
  std::vector<std::function<void()>> out;
  if (complete) {
    return out;
  }
  complete = true;
  failure = s;
  for (auto& cb : on_complete) {
    out.push_back([cb = std::move(cb), s] { cb(s); });
  }
  on_complete.clear();
  cv.NotifyAll();
  return out;
}

std::vector<std::function<void()>> HandleState::ReleaseLocked() {
  std::vector<std::function<void()>> out;
  if (released) {
    return out;
  }
  released = true;
  for (auto& cb : on_released) {
    out.push_back(std::move(cb));
  }
  on_released.clear();
  cv.NotifyAll();
  return out;
}

void StreamState::Fail(const Status& s) {
  MutexLock lock(mu);
  if (error.ok()) {
    error = s;
  }
  cv.NotifyAll();
}

ConnectorImpl::~ConnectorImpl() {
  link_->Detach();  // Live SharedTensors stop calling in.
  {
    MutexLock lock(mu_);
    stopping_ = true;
    for (auto& [id, w] : streams_) {
      if (auto s = w.lock()) {
        s->Fail(Status(StatusCode::kCancelled, "connector is shutting down"));
      }
    }
    for (auto& w : store_streams_) {
      if (auto s = w.lock()) {
        s->Fail(Status(StatusCode::kCancelled, "connector is shutting down"));
      }
    }
  }
  cv_.NotifyAll();
  if (control_.joinable()) {
    control_.join();
  }
  for (auto& t : store_workers_) {
    t.join();
  }
  fetch_pool_.reset();  // Failed streams end their fetch tasks.
  // Queued store puts never ran: their handles end cancelled, not hanging.
  std::vector<std::weak_ptr<HandleState>> pending;
  {
    MutexLock lock(mu_);
    store_tasks_.clear();
    pending.swap(store_pending_);
  }
  for (auto& w : pending) {
    if (auto h = w.lock()) {
      std::vector<std::function<void()>> cbs;
      {
        MutexLock lock(h->mu);
        cbs = h->CompleteLocked(Status(StatusCode::kCancelled, "connector closed"));
      }
      RunAll(cbs);
    }
  }
  // p2p payloads: no consumer can reach them any more. Their handles end
  // (Wait and WaitReleased return) and the producer may free its buffers.
  std::map<std::uint64_t, std::shared_ptr<HandleState>> p2p;
  {
    MutexLock lock(mu_);
    p2p.swap(payloads_);
  }
  for (auto& [id, h] : p2p) {
    std::vector<std::function<void()>> cbs, released;
    {
      MutexLock lock(h->mu);
      cbs = h->CompleteLocked(Status(StatusCode::kCancelled, "connector closed"));
      released = h->ReleaseLocked();
    }
    RunAll(cbs);
    RunAll(released);
  }
  if (engine_ != nullptr) {
    engine_->SetNotifyHandler(nullptr);
  }
  store_.reset();
  // Batches still in flight end (and release their pins) with the engine.
  engine_.reset();
}

Status ConnectorImpl::Init() {
  static const std::regex kRole("[a-z0-9_-]{1,32}");
  if (!std::regex_match(config_.role, kRole)) {
    return InvalidArgumentError("connector: role must match [a-z0-9_-]{1,32}, got '" +
                                config_.role + "'");
  }
  if (config_.store_threads < 1 || config_.store_threads > 256) {
    return InvalidArgumentError("connector: store_threads must be in 1..256");
  }
  if (config_.consume_timeout.count() <= 0) {
    return InvalidArgumentError("connector: consume_timeout must be positive");
  }
  if (config_.mode == TransferMode::kStore && config_.store.master.empty()) {
    return InvalidArgumentError("connector: store mode needs store.master (or SLUICE_MASTER)");
  }
  SLUICE_ASSIGN_OR_RETURN(engine_, TransferEngine::Create(config_.engine));
  if (!config_.store.master.empty()) {
    SLUICE_ASSIGN_OR_RETURN(store_, StoreClient::Create(engine_.get(), config_.store));
  }
  engine_->SetNotifyHandler([this](const NotifyMessage& m) {
    OnNotify(m.sender, std::string(reinterpret_cast<const char*>(m.data.data()), m.data.size()));
  });
  // Up to 4096 store-mode consumes read at once; threads idle for 30 s exit.
  fetch_pool_ = std::make_unique<ElasticPool>("sluice-fetch", 4096, std::chrono::seconds(30));
  control_ = std::thread([this] { ControlLoop(); });
  for (int i = 0; i < config_.store_threads && store_ != nullptr; ++i) {
    store_workers_.emplace_back([this] { StoreWorker(); });
  }
  return Status::Ok();
}

Result<std::pair<RegionKey, std::uint64_t>> ConnectorImpl::Ensure(void* data, std::uint64_t len,
                                                                  Access access) {
  const auto addr = reinterpret_cast<std::uintptr_t>(data);
  MutexLock lock(reg_mu_);
  auto it = regs_.upper_bound(addr);
  if (it != regs_.begin()) {
    auto prev = std::prev(it);
    const bool covers = prev->first <= addr && addr + len <= prev->first + prev->second.len;
    const bool enough = !AllowsRemoteRead(access) || AllowsRemoteRead(prev->second.access);
    if (covers && enough) {
      return std::make_pair(prev->second.key, addr - prev->first);
    }
  }
  // Drop cached registrations overlapping the new range: that memory was
  // freed and reused by the caller (or needs wider access).
  for (auto o = regs_.begin(); o != regs_.end();) {
    if (o->first < addr + len && addr < o->first + o->second.len) {
      Status s = engine_->UnregisterMemory(o->second.key);
      if (!s.ok() && s.code() != StatusCode::kNotFound) {
        return s.WithContext("memory at " + std::to_string(addr) +
                             " overlaps a registration still in use");
      }
      o = regs_.erase(o);
    } else {
      ++o;
    }
  }
  SLUICE_ASSIGN_OR_RETURN(RegionKey key,
                          engine_->RegisterMemory(data, len, MemoryKind::kHost, access));
  regs_[addr] = Registration{len, key, access};
  return std::make_pair(key, std::uint64_t{0});
}

void ConnectorImpl::Forget(const void* data) {
  const auto addr = reinterpret_cast<std::uintptr_t>(data);
  MutexLock lock(reg_mu_);
  auto it = regs_.find(addr);
  if (it != regs_.end() && engine_->UnregisterMemory(it->second.key).ok()) {
    regs_.erase(it);
  }
}

Result<std::unique_ptr<StageHandle>> ConnectorImpl::Publish(const StagePayload& p) {
  if (p.request_id.empty() || p.request_id.size() > 256) {
    return InvalidArgumentError("payload request_id must be 1..256 bytes");
  }
  SLUICE_RETURN_IF_ERROR(p.tensor.Validate("payload tensor"));
  if (!p.tensor.contiguous()) {
    return InvalidArgumentError("payload tensor " + p.tensor.ToString() +
                                " is not contiguous (make it contiguous first)");
  }
  if (p.tensor.nbytes() == 0) {
    return InvalidArgumentError("payload tensor " + p.tensor.ToString() + " is empty");
  }
  TransferMode mode = config_.mode;
  if (mode == TransferMode::kAuto) {
    mode = (store_ == nullptr || (!p.bound_consumer.empty() && p.keep_buffer))
               ? TransferMode::kP2p
               : TransferMode::kStore;
  }
  if (mode == TransferMode::kStore && store_ == nullptr) {
    return FailedPreconditionError("store mode needs a store (set store.master / SLUICE_MASTER)");
  }
  auto h = std::make_shared<HandleState>();
  PayloadDescriptor& d = h->desc;
  d.request_id = p.request_id;
  d.kind = p.kind;
  d.dtype = p.tensor.dtype;
  d.shape = p.tensor.shape;
  d.strides = RowMajorStrides(d.shape);
  d.chunk_dim = p.chunk_dim;
  d.num_chunks = p.num_chunks;
  d.mode = mode;
  d.lease = p.lease;
  SLUICE_ASSIGN_OR_RETURN(
      h->layout, ChunkLayout::Make(d.shape, DTypeSize(d.dtype), d.chunk_dim, d.num_chunks));
  h->base = static_cast<char*>(p.tensor.data);
  h->progressive = p.progressive;
  d.complete = !p.progressive;
  {
    MutexLock lock(h->mu);  // Not shared yet: never contended.
    h->ready.assign(static_cast<std::size_t>(d.num_chunks), false);
    h->queued.assign(static_cast<std::size_t>(d.num_chunks), false);
  }
  if (mode == TransferMode::kP2p) {
    SLUICE_RETURN_IF_ERROR(PublishP2p(h, p));
  } else {
    SLUICE_RETURN_IF_ERROR(PublishStore(h, p));
  }
  if (!p.progressive) {
    for (int i = 0; i < d.num_chunks; ++i) {
      SLUICE_RETURN_IF_ERROR(h->publish_chunk(i));
    }
  }
  return std::unique_ptr<StageHandle>(new StageHandle(h));
}

Result<std::unique_ptr<ChunkStream>> ConnectorImpl::Consume(const PayloadDescriptor& d,
                                                            const TensorView& dst) {
  SLUICE_RETURN_IF_ERROR(d.Validate());
  SLUICE_RETURN_IF_ERROR(dst.Validate("dst"));
  if (dst.dtype != d.dtype || dst.shape != d.shape) {
    TensorView want{nullptr, d.dtype, d.shape, {}};
    return InvalidArgumentError("dst is " + dst.ToString() + " but the payload is " +
                                want.ToString());
  }
  if (!dst.contiguous()) {
    return InvalidArgumentError("dst " + dst.ToString() + " is not contiguous");
  }
  if (d.mode == TransferMode::kStore && store_ == nullptr) {
    return FailedPreconditionError("a store-mode payload needs a store (store.master)");
  }
  auto s = std::make_shared<StreamState>();
  s->desc = d;
  SLUICE_ASSIGN_OR_RETURN(
      s->layout, ChunkLayout::Make(d.shape, DTypeSize(d.dtype), d.chunk_dim, d.num_chunks));
  s->dst = dst;
  s->dst.strides = RowMajorStrides(dst.shape);
  {
    MutexLock lock(s->mu);  // Not shared yet: never contended.
    s->chunks.assign(static_cast<std::size_t>(d.num_chunks), StreamState::Chunk::kWaiting);
  }
  s->timeout = config_.consume_timeout;
  SLUICE_RETURN_IF_ERROR(Ensure(dst.data, dst.nbytes(), Access::kLocalOnly).status());
  if (d.mode == TransferMode::kP2p) {
    SLUICE_RETURN_IF_ERROR(ConsumeP2p(s));
  } else {
    SLUICE_RETURN_IF_ERROR(ConsumeStore(s));
  }
  return std::unique_ptr<ChunkStream>(new ChunkStream(s));
}

Status ConnectorImpl::Release(const PayloadDescriptor& d) {
  SLUICE_RETURN_IF_ERROR(d.Validate());
  return d.mode == TransferMode::kP2p ? ReleaseP2p(d) : ReleaseStore(d);
}

}  // namespace internal

Status ConnectorConfig::ApplyEnvironment() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  if (store.master.empty()) {
    store.master = env("SLUICE_MASTER");
  }
  if (const std::string l = env("SLUICE_LISTEN"); !l.empty()) {
    engine.listen = l;
  }
  if (const std::string m = env("SLUICE_TRANSFER_MODE"); !m.empty()) {
    Result<TransferMode> t = ParseTransferMode(m);
    if (!t.ok()) {
      return t.status().WithContext("SLUICE_TRANSFER_MODE");
    }
    mode = *t;
  }
  if (const std::string t = env("SLUICE_TRANSPORTS"); !t.empty()) {
    engine.transports.clear();
    std::size_t at = 0;
    while (at <= t.size()) {
      const std::size_t comma = std::min(t.find(',', at), t.size());
      engine.transports.push_back(t.substr(at, comma - at));
      at = comma + 1;
    }
  }
  if (security.open() && !security.client_tls() && !security.server_tls()) {
    SLUICE_ASSIGN_OR_RETURN(security, LoadSecurity({}));
  }
  return Status::Ok();
}

StageHandle::StageHandle(std::shared_ptr<internal::HandleState> s) : state_(std::move(s)) {}
StageHandle::~StageHandle() = default;

const PayloadDescriptor& StageHandle::descriptor() const {
  return state_->desc;
}

Status StageHandle::MarkReady(int i) {
  {
    MutexLock lock(state_->mu);
    if (!state_->progressive) {
      return FailedPreconditionError("MarkReady: the payload was not published as progressive");
    }
    if (i < 0 || i >= state_->desc.num_chunks) {
      return InvalidArgumentError("MarkReady: chunk " + std::to_string(i) + " outside 0.." +
                                  std::to_string(state_->desc.num_chunks - 1));
    }
    if (state_->complete && !state_->failure.ok()) {
      return FailedPreconditionError("MarkReady: the payload failed: " +
                                     state_->failure.ToString());
    }
  }
  return state_->publish_chunk(i);
}

Status StageHandle::Wait(std::chrono::milliseconds timeout) {
  MutexLock lock(state_->mu);
  if (!state_->cv.WaitFor(lock, timeout,
                          [&]() SLUICE_REQUIRES(state_->mu) { return state_->complete; })) {
    return DeadlineExceededError("publish of '" + state_->desc.request_id + "' still running");
  }
  return state_->failure;
}

bool StageHandle::released() const {
  MutexLock lock(state_->mu);
  return state_->released;
}

Status StageHandle::WaitReleased(std::chrono::milliseconds timeout) {
  MutexLock lock(state_->mu);
  if (!state_->cv.WaitFor(lock, timeout,
                          [&]() SLUICE_REQUIRES(state_->mu) { return state_->released; })) {
    return DeadlineExceededError("payload '" + state_->desc.request_id + "' not released");
  }
  return Status::Ok();
}

void StageHandle::OnComplete(std::function<void(const Status&)> cb) {
  MutexLock lock(state_->mu);
  if (state_->complete) {
    const Status s = state_->failure;
    lock.Unlock();
    cb(s);
    return;
  }
  state_->on_complete.push_back(std::move(cb));
}

void StageHandle::OnReleased(std::function<void()> cb) {
  MutexLock lock(state_->mu);
  if (state_->released) {
    lock.Unlock();
    cb();
    return;
  }
  state_->on_released.push_back(std::move(cb));
}

ChunkStream::ChunkStream(std::shared_ptr<internal::StreamState> s) : state_(std::move(s)) {}

ChunkStream::~ChunkStream() {
  {
    MutexLock lock(state_->mu);
    state_->stopping = true;
    state_->cv.NotifyAll();
  }
  if (state_->on_destroy) {
    state_->on_destroy();
  }
}

Result<std::optional<ChunkView>> ChunkStream::Next() {
  using Clock = std::chrono::steady_clock;
  internal::StreamState& s = *state_;
  const auto deadline = Clock::now() + s.timeout;
  MutexLock lock(s.mu);
  while (true) {
    if (!s.error.ok()) {
      return s.error;
    }
    if (s.next >= s.desc.num_chunks) {
      return std::optional<ChunkView>();
    }
    if (s.chunks[static_cast<std::size_t>(s.next)] == internal::StreamState::Chunk::kLanded) {
      const int i = s.next++;
      ChunkView v;
      v.index = i;
      v.start = s.layout.start(i);
      v.length = s.layout.length(i);
      v.view = s.dst;
      if (s.desc.chunk_dim >= 0) {
        const auto dim = static_cast<std::size_t>(s.desc.chunk_dim);
        v.view.shape[dim] = v.length;
        v.view.data =
            static_cast<char*>(s.dst.data) +
            v.start * s.dst.strides[dim] * static_cast<std::int64_t>(DTypeSize(s.dst.dtype));
      } else {
        v.length = 1;
      }
      return std::optional<ChunkView>(std::move(v));
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      return DeadlineExceededError("chunk " + std::to_string(s.next) + " of '" + s.desc.request_id +
                                   "' did not land in time");
    }
    const auto slice = std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(250));
    if (!s.cv.WaitFor(lock, slice,
                      [&]() SLUICE_REQUIRES(s.mu) {
                        return !s.error.ok() || s.chunks[static_cast<std::size_t>(s.next)] ==
                                                    internal::StreamState::Chunk::kLanded;
                      }) &&
        s.ping) {
      // Nothing for a while: make sure the producer is still there.
      lock.Unlock();
      Status alive = s.ping();
      lock.Lock();
      if (!alive.ok() && s.error.ok()) {
        s.error = alive.WithContext("producer of '" + s.desc.request_id + "'");
      }
    }
  }
}

DiffusionConnector::DiffusionConnector(std::unique_ptr<internal::ConnectorImpl> impl)
    : impl_(std::move(impl)) {}
DiffusionConnector::~DiffusionConnector() = default;

Result<std::unique_ptr<DiffusionConnector>> DiffusionConnector::Create(ConnectorConfig config) {
  if (config.engine.secret.empty()) {
    config.engine.secret = TransferSecret(config.security);
  }
  if (config.store.security.open() && !config.store.security.client_tls()) {
    config.store.security = config.security;
  }
  auto impl = std::make_unique<internal::ConnectorImpl>(std::move(config));
  SLUICE_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<DiffusionConnector>(new DiffusionConnector(std::move(impl)));
}

Result<std::unique_ptr<StageHandle>> DiffusionConnector::Publish(const StagePayload& payload) {
  return impl_->Publish(payload);
}
Result<std::unique_ptr<ChunkStream>> DiffusionConnector::Consume(const PayloadDescriptor& d,
                                                                 const TensorView& dst) {
  return impl_->Consume(d, dst);
}
Status DiffusionConnector::Release(const PayloadDescriptor& d) {
  return impl_->Release(d);
}
Result<PayloadView> DiffusionConnector::ConsumeInPlace(const PayloadDescriptor& d) {
  return impl_->ConsumeInPlace(d);
}
void DiffusionConnector::Forget(const void* data) {
  impl_->Forget(data);
}
Status DiffusionConnector::Warm() {
  return impl_->Warm();
}
TransferEngine& DiffusionConnector::engine() {
  return impl_->engine();
}
std::uint64_t DiffusionConnector::bytes_copied_outside_transfers() const {
  return impl_->bytes_copied();
}
const ConnectorConfig& DiffusionConnector::config() const {
  return impl_->config();
}

}  // namespace sluice
