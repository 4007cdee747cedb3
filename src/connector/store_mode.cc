// store mode: each chunk is one store object "<prefix>/<i>" written from
// the producer's runs by a pool of connector threads; consumers wait for
// each key and read it straight into dst's runs. A payload complete at
// publish with several chunks is one object "<prefix>/all" (its chunks back
// to back): one put and one lookup instead of one per chunk, and the
// consumer still sees chunk i as soon as its range has landed.
#include "connector/store_mode.h"

#include "common/log.h"
#include "common/mutex.h"
#include "common/random.h"

namespace sluice::internal {
namespace {

LeasePolicy ToPolicy(const Lease& l) {
  switch (l.kind) {
    case Lease::Kind::kDeleteOnConsume:
      return LeasePolicy::DeleteOnConsume(1);
    case Lease::Kind::kTtl:
      return LeasePolicy::Ttl(std::chrono::duration_cast<std::chrono::milliseconds>(l.ttl));
    case Lease::Kind::kCache:
      return LeasePolicy::Cache();
    case Lease::Kind::kPinned:
      return LeasePolicy::SoftPin();
  }
  return LeasePolicy::Cache();
}

// The runs of chunks [first, first + count) at `base`, chunk after chunk
// (a store object's layout); `parts` gets each chunk's number of runs.
std::vector<StoreClient::IoRun> RunsOf(const ChunkLayout& l, int first, int count, char* base,
                                       std::vector<std::size_t>* parts = nullptr) {
  std::vector<StoreClient::IoRun> runs;
  for (int i = first; i < first + count; ++i) {
    const std::vector<ByteRun> chunk = l.Runs(i);
    for (const ByteRun& r : chunk) {
      runs.push_back(StoreClient::IoRun{base + r.offset, r.length});
    }
    if (parts != nullptr) {
      parts->push_back(chunk.size());
    }
  }
  return runs;
}

}  // namespace

StoreChannel::StoreChannel(StoreClient& store, RegistrationCache& regs, std::string role,
                           std::chrono::milliseconds timeout, int put_threads)
    : store_(store),
      regs_(regs),
      role_(std::move(role)),
      timeout_(timeout),
      link_(std::make_shared<OwnerLink<StoreChannel>>(this)) {
  // Up to 4096 consumes read at once; threads idle for 30 s exit.
  fetch_pool_ = std::make_unique<ElasticPool>("sluice-fetch", 4096, std::chrono::seconds(30));
  for (int i = 0; i < put_threads; ++i) {
    put_workers_.emplace_back([this] { PutWorker(); });
  }
}

void StoreChannel::Shutdown() {
  link_->Detach();  // Handles stop calling in.
  {
    MutexLock lock(mu_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
    for (auto& w : streams_) {
      if (auto s = w.lock()) {
        s->Fail(Status(StatusCode::kCancelled, "connector is shutting down"));
      }
    }
  }
  cv_.NotifyAll();
  for (auto& t : put_workers_) {
    t.join();
  }
  put_workers_.clear();
  fetch_pool_.reset();  // Failed streams end their fetch tasks.
  // Queued puts never ran: their handles end cancelled, not hanging.
  std::vector<std::weak_ptr<HandleState>> pending;
  {
    MutexLock lock(mu_);
    tasks_.clear();
    pending.swap(pending_);
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
}

void StoreChannel::RunTask(std::function<void()> task) {
  MutexLock lock(mu_);
  tasks_.push_back(std::move(task));
  cv_.NotifyAll();
}

void StoreChannel::PutWorker() {
  MutexLock lock(mu_);
  while (true) {
    cv_.Wait(lock, [&]() SLUICE_REQUIRES(mu_) { return stopping_ || !tasks_.empty(); });
    if (stopping_) {
      return;
    }
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.Unlock();
    task();
    lock.Lock();
  }
}

void StoreChannel::PutChunk(const std::shared_ptr<HandleState>& hs, int i) {
  PutOptions o;
  o.policy = ToPolicy(hs->desc.lease);
  TensorMeta meta{std::string(DTypeName(hs->desc.dtype)), hs->desc.shape, {}, ""};
  if (!hs->desc.one_object && hs->desc.chunk_dim >= 0) {
    meta.shape[static_cast<std::size_t>(hs->desc.chunk_dim)] = hs->layout.length(i);
  }
  const auto runs = hs->desc.one_object ? RunsOf(hs->layout, 0, hs->desc.num_chunks, hs->base)
                                        : RunsOf(hs->layout, i, 1, hs->base);
  o.tensor = meta;
  o.request_id = hs->desc.key_prefix + "#" + std::to_string(i);
  const auto give_up = std::chrono::steady_clock::now() + timeout_;
  auto backoff = std::chrono::milliseconds(5);
  Status s;
  while (true) {
    s = store_.PutFromRuns(hs->desc.StoreKey(i), runs, o);
    // A full store is backpressure: wait for consumers to drain it.
    if (s.code() != StatusCode::kResourceExhausted ||
        std::chrono::steady_clock::now() + backoff > give_up) {
      break;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  std::vector<std::function<void()>> cbs;
  {
    MutexLock lock(hs->mu);
    if (!s.ok()) {
      cbs = hs->CompleteLocked(s.WithContext("chunk " + std::to_string(i)));
    } else if ((hs->published += hs->desc.one_object ? hs->desc.num_chunks : 1) ==
               hs->desc.num_chunks) {
      cbs = hs->CompleteLocked(Status::Ok());
      auto rel = hs->ReleaseLocked();  // The producer's buffer is free.
      cbs.insert(cbs.end(), rel.begin(), rel.end());
    }
  }
  RunAll(cbs);
}

Status StoreChannel::Publish(const std::shared_ptr<HandleState>& h, const StagePayload& p) {
  SLUICE_RETURN_IF_ERROR(regs_
                             .Ensure(p.tensor.data, p.tensor.nbytes(), Access::kLocalOnly,
                                     p.tensor.memory, p.tensor.device)
                             .status());
  h->desc.key_prefix = "sluice/" + role_ + "/" + p.request_id + "/" + RandomId();
  h->desc.one_object = !p.progressive && h->desc.num_chunks > 1;
  {
    MutexLock lock(mu_);
    std::erase_if(pending_, [](const std::weak_ptr<HandleState>& w) {
      auto s = w.lock();
      if (s == nullptr) {
        return true;
      }
      MutexLock hl(s->mu);
      return s->complete;
    });
    pending_.push_back(h);
  }
  std::weak_ptr<HandleState> weak = h;
  // Through the owner link, not `this`: a handle may outlive the
  // connector, and then MarkReady fails instead of reaching freed memory.
  h->publish_chunk = [link = link_, weak](int i) -> Status {
    std::shared_ptr<HandleState> hs = weak.lock();
    if (hs == nullptr) {
      return FailedPreconditionError("payload is gone");
    }
    Status out = FailedPreconditionError("MarkReady: the connector is closed");
    link->Call([&](StoreChannel& c) {
      out = Status::Ok();
      {
        MutexLock lock(hs->mu);
        if (hs->ready[static_cast<std::size_t>(i)]) {
          return;
        }
        hs->ready[static_cast<std::size_t>(i)] = true;
        if (hs->desc.one_object && i + 1 < hs->desc.num_chunks) {
          return;  // The last chunk's call puts them all.
        }
        if (hs->draining) {
          return;  // The running drain task picks it up.
        }
        hs->draining = true;
      }
      // One task per payload puts its ready chunks lowest index first, so
      // chunk 0 lands first (consumers start on it) and payloads move in
      // parallel with each other. The task keeps the state alive: the
      // producer's buffer must stay until the handle completes anyway.
      c.RunTask([&c, hs] {
        while (true) {
          int k_ready = -1;
          {
            MutexLock lock(hs->mu);
            for (int k = 0; k < hs->desc.num_chunks && !hs->complete; ++k) {
              if (hs->ready[static_cast<std::size_t>(k)] &&
                  !hs->queued[static_cast<std::size_t>(k)]) {
                k_ready = k;
                hs->queued[static_cast<std::size_t>(k)] = true;
                break;
              }
            }
            if (k_ready < 0) {
              hs->draining = false;
              return;
            }
          }
          c.PutChunk(hs, k_ready);
        }
      });
    });
    return out;
  };
  return Status::Ok();
}

Status StoreChannel::Consume(const std::shared_ptr<StreamState>& s) {
  {
    MutexLock lock(mu_);
    std::erase_if(streams_, [](const std::weak_ptr<StreamState>& w) { return w.expired(); });
    streams_.push_back(s);
  }
  {
    MutexLock lock(s->mu);
    s->fetching = true;
  }
  StreamState* raw = s.get();
  s->on_destroy = [raw] {
    MutexLock lock(raw->mu);
    raw->cv.Wait(lock, [raw]() SLUICE_REQUIRES(raw->mu) { return !raw->fetching; });
  };
  Status started = fetch_pool_->Run([this, s] {
    Fetch(s);
    MutexLock lock(s->mu);
    s->fetching = false;
    s->cv.NotifyAll();
  });
  if (!started.ok()) {
    MutexLock lock(s->mu);
    s->fetching = false;
  }
  return started.WithContext("consume");
}

void StoreChannel::Fetch(const std::shared_ptr<StreamState>& s) {
  using Clock = std::chrono::steady_clock;
  // One object: a single read whose groups of runs are the chunks.
  const int objects = s->desc.one_object ? 1 : s->desc.num_chunks;
  for (int i = 0; i < objects; ++i) {
    const std::string key = s->desc.StoreKey(i);
    std::vector<std::size_t> parts;
    const auto runs = RunsOf(s->layout, i, s->desc.one_object ? s->desc.num_chunks : 1,
                             static_cast<char*>(s->dst.data), &parts);
    auto landed = [this, &s, i](std::size_t part) {
      const std::size_t chunk = static_cast<std::size_t>(i) + part;
      if (chunk + 1 == static_cast<std::size_t>(s->desc.num_chunks)) {
        // The whole payload is read, and the read's end (sent next) deletes
        // a delete-on-consume payload: a Release from here on needs no call.
        MutexLock lock(mu_);
        consumed_.push_back(s->desc.key_prefix);
        if (consumed_.size() > 4096) {
          consumed_.pop_front();
        }
      }
      {
        MutexLock lock(s->mu);
        s->chunks[chunk] = StreamState::Chunk::kLanded;
      }
      s->cv.NotifyAll();  // Unlocked: the woken consumer finds the lock free.
    };
    const auto deadline = Clock::now() + s->timeout;
    // One call: the master answers once the chunk is committed. Short
    // waits, so a destroyed stream stops promptly.
    Result<ObjectMeta> got = DeadlineExceededError("chunk not published in time");
    while (true) {
      {
        MutexLock lock(s->mu);
        if (s->stopping || !s->error.ok()) {
          return;
        }
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        break;
      }
      got = store_.GetIntoRunsInParts(key, runs, parts,
                                      std::min(left, std::chrono::milliseconds(200)), landed);
      if (got.ok() || got.status().code() != StatusCode::kDeadlineExceeded) {
        break;
      }
    }
    if (!got.ok()) {
      s->Fail(
          got.status().WithContext(s->desc.one_object ? "payload" : "chunk " + std::to_string(i)));
      return;
    }
  }
}

Result<PayloadView> StoreChannel::ConsumeInPlace(const PayloadDescriptor& d) {
  if (!d.one_object && d.num_chunks > 1) {
    return RefuseInPlace(d, "its chunks are separate store objects");
  }
  if (d.num_chunks > 1 && NumElements({d.shape.begin(), d.shape.begin() + d.chunk_dim}) != 1) {
    // The object holds chunk after chunk, each its runs back to back: the
    // tensor's own layout only when every chunk is one run.
    return RefuseInPlace(d,
                         "its store object holds the chunks one after another, not in the "
                         "tensor's layout (chunks along dimension " +
                             std::to_string(d.chunk_dim) + ")");
  }
  Result<ObjectView> v = store_.GetInPlace(d.StoreKey(0), timeout_);
  if (!v.ok()) {
    // The read waits for the commit, so kFailedPrecondition means no
    // replica this process can map.
    return v.status().code() == StatusCode::kFailedPrecondition
               ? RefuseInPlace(d, v.status().message())
               : v.status().WithContext("payload '" + d.request_id + "'");
  }
  const TensorView shape_only{nullptr, d.dtype, d.shape, {}};
  if (v->size() != shape_only.nbytes()) {
    return Status(StatusCode::kDataLoss, "payload '" + d.request_id + "': its store object holds " +
                                             std::to_string(v->size()) + " bytes, not the " +
                                             std::to_string(shape_only.nbytes()) + " of " +
                                             shape_only.ToString());
  }
  // The view's read lease lasts as long as `keep`.
  auto held = std::make_shared<ObjectView>(std::move(*v));
  PayloadView pv;
  pv.view = shape_only;
  pv.view.data = const_cast<void*>(held->data());  // Read-only by contract.
  pv.keep = std::move(held);
  return pv;
}

Status StoreChannel::Release(const PayloadDescriptor& d) {
  if (d.lease.kind != Lease::Kind::kDeleteOnConsume) {
    return Status::Ok();  // Other leases end by themselves (ttl, eviction) or never.
  }
  {
    MutexLock lock(mu_);
    auto it = std::find(consumed_.rbegin(), consumed_.rend(), d.key_prefix);
    if (it != consumed_.rend()) {
      consumed_.erase(std::next(it).base());
      return Status::Ok();  // Read whole here: every chunk is gone already.
    }
  }
  Status first;
  for (const std::string& key : d.StoreKeys()) {
    Status s = store_.Remove(key);
    if (!s.ok() && s.code() != StatusCode::kNotFound && first.ok()) {
      first = s;  // kNotFound: already consumed by the read.
    }
  }
  return first;
}

}  // namespace sluice::internal
