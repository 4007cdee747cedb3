#include <cstdlib>
#include <regex>

#include "common/log.h"
#include "common/mutex.h"
#include "common/random.h"
#include "connector/connector_impl.h"
#include "connector/p2p.h"
#include "connector/store_mode.h"

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
  // Each channel fails its streams and handles and joins its threads; the
  // engine's notify handler (into the p2p channel) goes before the channel.
  if (store_channel_ != nullptr) {
    store_channel_->Shutdown();
  }
  if (p2p_ != nullptr) {
    p2p_->Shutdown();
  }
  if (engine_ != nullptr) {
    engine_->SetNotifyHandler(nullptr);
  }
  store_channel_.reset();
  p2p_.reset();
  store_.reset();
  regs_.reset();
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
  regs_ = std::make_unique<RegistrationCache>(*engine_);
  if (!config_.store.master.empty()) {
    SLUICE_ASSIGN_OR_RETURN(store_, StoreClient::Create(engine_.get(), config_.store));
    store_channel_ = std::make_unique<StoreChannel>(*store_, *regs_, config_.role,
                                                    config_.consume_timeout, config_.store_threads);
  }
  auto p2p = std::make_unique<P2pChannel>(*engine_, *regs_);
  engine_->SetNotifyHandler([p = p2p.get()](const NotifyMessage& m) {
    p->OnNotify(m.sender, std::string(reinterpret_cast<const char*>(m.data.data()), m.data.size()));
  });
  p2p_ = std::move(p2p);
  return Status::Ok();
}

Channel* ConnectorImpl::ChannelFor(TransferMode mode) {
  return mode == TransferMode::kP2p ? p2p_.get() : store_channel_.get();
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
  Channel* channel = ChannelFor(mode);
  if (channel == nullptr) {
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
  d.memory = p.tensor.memory;
  d.device = p.tensor.device;
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
  SLUICE_RETURN_IF_ERROR(channel->Publish(h, p));
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
  Channel* channel = ChannelFor(d.mode);
  if (channel == nullptr) {
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
  SLUICE_RETURN_IF_ERROR(
      regs_->Ensure(dst.data, dst.nbytes(), Access::kLocalOnly, dst.memory, dst.device).status());
  SLUICE_RETURN_IF_ERROR(channel->Consume(s));
  return std::unique_ptr<ChunkStream>(new ChunkStream(s));
}

Status ConnectorImpl::Release(const PayloadDescriptor& d) {
  SLUICE_RETURN_IF_ERROR(d.Validate());
  Channel* channel = ChannelFor(d.mode);
  return channel == nullptr ? FailedPreconditionError("no store") : channel->Release(d);
}

Result<PayloadView> ConnectorImpl::ConsumeInPlace(const PayloadDescriptor& d) {
  SLUICE_RETURN_IF_ERROR(d.Validate());
  Channel* channel = ChannelFor(d.mode);
  if (channel == nullptr) {
    return FailedPreconditionError("a store-mode payload needs a store (store.master)");
  }
  return channel->ConsumeInPlace(d);
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
    config.engine.encrypt_data = config.engine.encrypt_data || config.security.encrypt_data;
  }
  if (config.store.security.open() && !config.store.security.client_tls()) {
    config.store.security = config.security;
  }
  auto impl = std::make_unique<internal::ConnectorImpl>(std::move(config));
  SLUICE_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<DiffusionConnector>(new DiffusionConnector(std::move(impl)));
}

Result<std::unique_ptr<StageHandle>> DiffusionConnector::Publish(const StagePayload& payload) {
  Result<std::unique_ptr<StageHandle>> h = impl_->Publish(payload);
  if (h.ok()) {
    published_.fetch_add(1, std::memory_order_relaxed);
    published_bytes_.fetch_add(payload.tensor.nbytes(), std::memory_order_relaxed);
  }
  return h;
}
Result<std::unique_ptr<ChunkStream>> DiffusionConnector::Consume(const PayloadDescriptor& d,
                                                                 const TensorView& dst) {
  Result<std::unique_ptr<ChunkStream>> s = impl_->Consume(d, dst);
  if (s.ok()) {
    consumed_.fetch_add(1, std::memory_order_relaxed);
    consumed_bytes_.fetch_add(d.nbytes(), std::memory_order_relaxed);
  }
  return s;
}
DiffusionConnector::Counters DiffusionConnector::counters() const {
  Counters c;
  c.published = published_.load(std::memory_order_relaxed);
  c.published_bytes = published_bytes_.load(std::memory_order_relaxed);
  c.consumed = consumed_.load(std::memory_order_relaxed);
  c.consumed_bytes = consumed_bytes_.load(std::memory_order_relaxed);
  return c;
}
Status DiffusionConnector::Release(const PayloadDescriptor& d) {
  return impl_->Release(d);
}
Result<PayloadView> DiffusionConnector::ConsumeInPlace(const PayloadDescriptor& d) {
  Result<PayloadView> v = impl_->ConsumeInPlace(d);
  if (v.ok()) {
    consumed_.fetch_add(1, std::memory_order_relaxed);
    consumed_bytes_.fetch_add(d.nbytes(), std::memory_order_relaxed);
  }
  return v;
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
