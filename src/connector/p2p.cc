// p2p mode: the consumer reads chunks straight from the producer's
// registered buffer. Control messages ride on engine notifies:
//   SUBSCRIBE(payload, stream)  consumer -> producer, also a liveness probe
//   READY(stream, first, count) producer -> consumer, chunks it may read
//   RELEASE(payload)            consumer -> producer, the buffer is free
//   GONE(stream, code, text)    producer -> consumer, no such payload
// Payload ids are random 64-bit values: knowing one is the capability to
// read or release that payload.
#include "connector/p2p.h"

#include <cstring>

#include "common/log.h"
#include "common/mutex.h"
#include "common/random.h"

namespace sluice::internal {
namespace {

enum Msg : std::uint8_t { kSubscribe = 1, kReady = 2, kRelease = 3, kGone = 4 };

void Put(std::string& s, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
}
bool Get(std::string_view s, std::size_t& at, int bytes, std::uint64_t* v) {
  if (at + static_cast<std::size_t>(bytes) > s.size()) {
    return false;
  }
  *v = 0;
  for (int i = 0; i < bytes; ++i) {
    *v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  }
  at += static_cast<std::size_t>(bytes);
  return true;
}

std::string Subscribe(std::uint64_t payload, std::uint64_t stream) {
  std::string m(1, static_cast<char>(kSubscribe));
  Put(m, payload, 8);
  Put(m, stream, 8);
  return m;
}
std::string Ready(std::uint64_t stream, std::uint32_t first, std::uint32_t count) {
  std::string m(1, static_cast<char>(kReady));
  Put(m, stream, 8);
  Put(m, first, 4);
  Put(m, count, 4);
  return m;
}

Status Send(TransferEngine& e, SegmentId seg, const std::string& m) {
  return e.Notify(seg, std::as_bytes(std::span(m.data(), m.size())));
}

std::uint64_t NonZeroId() {
  std::uint64_t v = 0;
  while (v == 0) {
    RandomBytes(&v, sizeof(v));
  }
  return v;
}

}  // namespace

P2pChannel::P2pChannel(TransferEngine& engine, RegistrationCache& regs)
    : engine_(engine), regs_(regs), link_(std::make_shared<OwnerLink<P2pChannel>>(this)) {
  // Up to 4096 answers at once; threads idle for 30 s exit.
  answer_pool_ = std::make_unique<ElasticPool>("sluice-p2p", 4096, std::chrono::seconds(30));
  control_ = std::thread([this] { ControlLoop(); });
}

void P2pChannel::Shutdown() {
  link_->Detach();  // Handles and streams stop calling in.
  {
    MutexLock lock(mu_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
    for (auto& [id, w] : streams_) {
      if (auto st = w.lock()) {
        st->Fail(Status(StatusCode::kCancelled, "connector is shutting down"));
      }
    }
  }
  cv_.NotifyAll();
  if (control_.joinable()) {
    control_.join();
  }
  answer_pool_.reset();
  // No consumer can reach the payloads any more. Their handles end (Wait
  // and WaitReleased return) and the producer may free its buffers.
  std::map<std::uint64_t, std::shared_ptr<HandleState>> payloads;
  {
    MutexLock lock(mu_);
    payloads.swap(payloads_);
  }
  for (auto& [id, h] : payloads) {
    std::vector<std::function<void()>> cbs, released;
    {
      MutexLock lock(h->mu);
      cbs = h->CompleteLocked(Status(StatusCode::kCancelled, "connector closed"));
      released = h->ReleaseLocked();
    }
    RunAll(cbs);
    RunAll(released);
  }
}

Status P2pChannel::Publish(const std::shared_ptr<HandleState>& h, const StagePayload& p) {
  SLUICE_ASSIGN_OR_RETURN(
      auto reg, regs_.Ensure(p.tensor.data, p.tensor.nbytes(), Access::kRemoteRead, p.tensor.memory,
                             p.tensor.device));
  h->desc.producer_endpoint = engine_.endpoint();
  h->desc.region_key = reg.first.value;
  h->desc.region_offset = reg.second;
  h->desc.payload_id = NonZeroId();
  {
    MutexLock lock(mu_);
    payloads_[h->desc.payload_id] = h;
  }
  std::weak_ptr<HandleState> weak = h;
  // Through the owner link, not `this`: a handle may outlive the
  // connector, and then MarkReady fails instead of reaching freed memory.
  h->publish_chunk = [link = link_, weak](int i) -> Status {
    std::shared_ptr<HandleState> hs = weak.lock();
    if (hs == nullptr) {
      return FailedPreconditionError("payload is gone");
    }
    std::vector<std::function<void()>> done;
    Status out = FailedPreconditionError("MarkReady: the connector is closed");
    link->Call([&](P2pChannel& c) {
      out = Status::Ok();
      std::vector<std::pair<SegmentId, std::uint64_t>> subs;
      {
        MutexLock lock(hs->mu);
        if (hs->ready[static_cast<std::size_t>(i)]) {
          return;
        }
        hs->ready[static_cast<std::size_t>(i)] = true;
        if (++hs->published == hs->desc.num_chunks) {
          done = hs->CompleteLocked(Status::Ok());
        }
        subs = hs->subscribers;
      }
      for (const auto& [seg, stream] : subs) {
        (void)Send(c.engine_, seg, Ready(stream, static_cast<std::uint32_t>(i), 1));
      }
    });
    RunAll(done);  // Outside the link: a callback may destroy the connector.
    return out;
  };
  return Status::Ok();
}

void P2pChannel::OnNotify(const std::string& sender, std::string msg) {
  MutexLock lock(mu_);
  if (inbox_.size() >= 65536) {
    SLUICE_LOG(warn, "connector: control inbox full; dropping a message from {}", sender);
    return;
  }
  inbox_.emplace_back(sender, std::move(msg));
  cv_.NotifyAll();
}

void P2pChannel::AnswerSubscribe(const std::string& sender, std::uint64_t payload,
                                 std::uint64_t stream) {
  std::shared_ptr<HandleState> h;
  {
    MutexLock lock(mu_);
    auto it = payloads_.find(payload);
    h = it == payloads_.end() ? nullptr : it->second;
  }
  Result<SegmentId> seg = engine_.OpenSegment(sender);
  if (!seg.ok()) {
    SLUICE_LOG(warn, "connector: cannot answer {}: {}", sender, seg.status().ToString());
    return;
  }
  if (h == nullptr) {
    std::string m(1, static_cast<char>(kGone));
    Put(m, stream, 8);
    Put(m, static_cast<std::uint8_t>(StatusCode::kNotFound), 1);
    m += "no such payload here (released, or the producer restarted)";
    (void)Send(engine_, *seg, m);
    return;
  }
  std::vector<bool> ready;
  {
    MutexLock hl(h->mu);
    const std::pair<SegmentId, std::uint64_t> sub{*seg, stream};
    if (std::find(h->subscribers.begin(), h->subscribers.end(), sub) == h->subscribers.end()) {
      h->subscribers.push_back(sub);
    }
    ready = h->ready;
  }
  // Ranges of consecutive ready chunks.
  for (std::size_t i = 0; i < ready.size();) {
    if (!ready[i]) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < ready.size() && ready[j]) {
      ++j;
    }
    (void)Send(engine_, *seg,
               Ready(stream, static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j - i)));
    i = j;
  }
}

void P2pChannel::ControlLoop() {
  MutexLock lock(mu_);
  while (true) {
    cv_.Wait(lock, [&]() SLUICE_REQUIRES(mu_) { return stopping_ || !inbox_.empty(); });
    if (stopping_) {
      return;
    }
    auto [sender, msg] = std::move(inbox_.front());
    inbox_.pop_front();
    std::size_t at = 1;
    std::uint64_t a = 0, b = 0, c = 0;
    const auto type = msg.empty() ? 0 : static_cast<std::uint8_t>(msg[0]);
    if (type == kSubscribe && Get(msg, at, 8, &a) && Get(msg, at, 8, &b)) {
      lock.Unlock();
      // Answering opens a segment back to the consumer, which blocks up to
      // the engine's connect timeout when it is unreachable: never on this
      // thread, which serves every other payload's READY and RELEASE.
      Status started =
          answer_pool_->Run([this, sender = sender, a, b] { AnswerSubscribe(sender, a, b); });
      if (!started.ok()) {
        SLUICE_LOG(warn, "connector: answering {} inline: {}", sender, started.ToString());
        AnswerSubscribe(sender, a, b);
      }
      lock.Lock();
    } else if (type == kReady && Get(msg, at, 8, &a) && Get(msg, at, 4, &b) &&
               Get(msg, at, 4, &c)) {
      auto it = streams_.find(a);
      std::shared_ptr<StreamState> s = it == streams_.end() ? nullptr : it->second.lock();
      lock.Unlock();
      if (s != nullptr) {
        Fetch(s, static_cast<int>(b), static_cast<int>(c));
      }
      lock.Lock();
    } else if (type == kRelease && Get(msg, at, 8, &a)) {
      auto it = payloads_.find(a);
      if (it != payloads_.end()) {
        std::shared_ptr<HandleState> h = std::move(it->second);
        payloads_.erase(it);
        lock.Unlock();
        std::vector<std::function<void()>> cbs;
        {
          MutexLock hl(h->mu);
          cbs = h->ReleaseLocked();
        }
        RunAll(cbs);
        lock.Lock();
      }
    } else if (type == kGone && Get(msg, at, 8, &a) && Get(msg, at, 1, &b)) {
      auto it = streams_.find(a);
      std::shared_ptr<StreamState> s = it == streams_.end() ? nullptr : it->second.lock();
      if (s != nullptr) {
        const auto code = b <= static_cast<std::uint64_t>(kMaxStatusCode)
                              ? static_cast<StatusCode>(b)
                              : StatusCode::kNotFound;
        s->Fail(Status(code, "producer " + sender + ": " + msg.substr(at)));
      }
    } else {
      SLUICE_LOG(warn, "connector: malformed control message ({} bytes) from {}", msg.size(),
                 sender);
    }
  }
}

void P2pChannel::Fetch(const std::shared_ptr<StreamState>& s, int first, int count) {
  const int n = s->desc.num_chunks;
  if (first < 0 || count < 1 || first >= n || count > n - first) {
    s->Fail(InvalidArgumentError("producer announced chunks outside the payload"));
    return;
  }
  for (int i = first; i < first + count; ++i) {
    {
      MutexLock lock(s->mu);
      if (s->stopping || !s->error.ok() ||
          s->chunks[static_cast<std::size_t>(i)] != StreamState::Chunk::kWaiting) {
        continue;
      }
      s->chunks[static_cast<std::size_t>(i)] = StreamState::Chunk::kFetching;
      ++s->in_flight;
    }
    std::vector<TransferRequest> ops;
    char* dst = static_cast<char*>(s->dst.data);
    for (const ByteRun& r : s->layout.Runs(i)) {
      ops.push_back(TransferRequest{OpKind::kRead, dst + r.offset, s->producer,
                                    RegionKey{s->desc.region_key}, s->desc.region_offset + r.offset,
                                    r.length, TransportHint::kAuto});
    }
    auto landed = [s, i](const Status& st) {
      {
        MutexLock lock(s->mu);
        --s->in_flight;
        if (st.ok()) {
          s->chunks[static_cast<std::size_t>(i)] = StreamState::Chunk::kLanded;
        } else if (s->error.ok()) {
          s->error = st.WithContext("chunk " + std::to_string(i));
        }
      }
      // After unlocking: the woken consumer finds the lock free. `s` keeps
      // the state alive.
      s->cv.NotifyAll();
    };
    Result<std::shared_ptr<TransferBatch>> b = engine_.Submit(ops, landed);
    if (!b.ok()) {
      landed(b.status());
    }
  }
}

Status P2pChannel::Consume(const std::shared_ptr<StreamState>& s) {
  SLUICE_ASSIGN_OR_RETURN(s->producer, engine_.OpenSegment(s->desc.producer_endpoint));
  s->stream_id = NonZeroId();
  {
    MutexLock lock(mu_);
    streams_[s->stream_id] = s;
  }
  const std::string sub = Subscribe(s->desc.payload_id, s->stream_id);
  const SegmentId seg = s->producer;
  // Through the owner link, not `this`: a stream may outlive the connector.
  s->ping = [link = link_, seg, sub] {
    Status sent(StatusCode::kCancelled, "the connector is closed");
    link->Call([&](P2pChannel& c) { sent = Send(c.engine_, seg, sub); });
    return sent;
  };
  if (s->desc.complete) {
    // Every chunk exists already: read them all now, no readiness round trip.
    // The subscription is sent only as a liveness probe while waiting.
    Fetch(s, 0, s->desc.num_chunks);
  }
  const std::uint64_t id = s->stream_id;
  StreamState* raw = s.get();
  s->on_destroy = [link = link_, id, raw] {
    {
      MutexLock lock(raw->mu);
      raw->cv.Wait(lock, [&]() SLUICE_REQUIRES(raw->mu) { return raw->in_flight == 0; });
    }
    link->Call([id](P2pChannel& c) {
      MutexLock lock(c.mu_);
      c.streams_.erase(id);
    });
  };
  return s->desc.complete ? Status::Ok() : s->ping();
}

Status RefuseInPlace(const PayloadDescriptor& d, std::string_view why) {
  return FailedPreconditionError("payload '" + d.request_id + "' cannot be read in place: " +
                                 std::string(why) + "; Consume it instead");
}

Result<PayloadView> P2pChannel::ConsumeInPlace(const PayloadDescriptor& d) {
  auto refuse = [&](std::string_view why) { return RefuseInPlace(d, why); };
  if (!d.complete) {
    return refuse("its chunks are published one by one");
  }
  if (d.memory == MemoryKind::kDevice) {
    return refuse("it is in the producer's device memory, which this process cannot map");
  }
  SLUICE_ASSIGN_OR_RETURN(SegmentId seg, engine_.OpenSegment(d.producer_endpoint));
  const TensorView shape_only{nullptr, d.dtype, d.shape, {}};
  Result<PeerMemory> mem =
      engine_.MapPeerMemory(seg, RegionKey{d.region_key}, d.region_offset, shape_only.nbytes());
  if (!mem.ok()) {
    return mem.status().code() == StatusCode::kFailedPrecondition
               ? refuse(mem.status().message())
               : mem.status().WithContext("payload '" + d.request_id + "'");
  }
  PayloadView v;
  v.view = shape_only;
  v.view.data = const_cast<void*>(mem->data);  // Read-only by contract.
  v.keep = std::move(mem->keep);
  return v;
}

Status P2pChannel::Release(const PayloadDescriptor& d) {
  SLUICE_ASSIGN_OR_RETURN(SegmentId seg, engine_.OpenSegment(d.producer_endpoint));
  std::string m(1, static_cast<char>(kRelease));
  Put(m, d.payload_id, 8);
  return Send(engine_, seg, m);
}

}  // namespace sluice::internal
