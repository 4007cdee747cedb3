// Gets: GetStart (optionally parked until the key commits), reads from the
// nearest replica, GetEnd.
#include <cstring>
#include <thread>

#include "common/mutex.h"
#include "store/client/store_client_impl.h"

namespace sluice::internal {

Result<ObjectMeta> StoreClientImpl::GetIntoRunsInParts(
    std::string_view key, std::span<const StoreClient::IoRun> runs,
    std::span<const std::size_t> parts, std::chrono::milliseconds wait,
    const std::function<void(std::size_t)>& landed) {
  std::uint64_t total = 0;
  for (const auto& r : runs) {
    if (r.data == nullptr || r.len == 0) {
      return InvalidArgumentError("GetIntoRuns: null or empty run");
    }
    total += r.len;
  }
  std::size_t grouped = 0;
  for (std::size_t n : parts) {
    grouped += n;
  }
  if (grouped != runs.size()) {
    return InvalidArgumentError("GetIntoRunsInParts: parts hold " + std::to_string(grouped) +
                                " runs of " + std::to_string(runs.size()));
  }
  SLUICE_ASSIGN_OR_RETURN(
      ObjectMeta meta, ReadWithVerdict(key, wait, [&](const OpenGet& g, bool* may_retry) {
        if (g.meta.size != total) {  // kRequest: not retried.
          return InvalidArgumentError("GetIntoRuns: object '" + g.key + "' has " +
                                      std::to_string(g.meta.size) + " bytes; the runs hold " +
                                      std::to_string(total));
        }
        if (parts.size() == 1) {
          return ReadRuns(g, runs, 0);
        }
        // A part handed on cannot be handed on again: no retry after one.
        return ReadParts(g, runs, parts, [&](std::size_t i) {
          *may_retry = false;
          if (landed) {
            landed(i);
          }
        });
      }));
  if (parts.size() == 1 && landed) {
    landed(0);
  }
  return meta;
}

Result<ObjectMeta> StoreClientImpl::ReadWithVerdict(
    std::string_view key, std::chrono::milliseconds wait,
    const std::function<Status(const OpenGet&, bool*)>& read) {
  MasterBackoff backoff(config_.master_retry);
  while (true) {
    SLUICE_ASSIGN_OR_RETURN(OpenGet g, GetStart(key, wait, &backoff));
    bool may_retry = true;
    const Status s = read(g, &may_retry);
    GetEnd(g, s.ok());
    if (s.ok()) {
      return g.meta;
    }
    if (!may_retry || s.scope() == FailureScope::kRequest || backoff.exhausted()) {
      return s;
    }
    backoff.Sleep();
  }
}

Result<StoreClientImpl::OpenGet> StoreClientImpl::GetStart(std::string_view key,
                                                           std::chrono::milliseconds wait,
                                                           MasterBackoff* shared) {
  MasterBackoff own(config_.master_retry);
  MasterBackoff& backoff = shared != nullptr ? *shared : own;
  while (true) {
    SLUICE_ASSIGN_OR_RETURN(OpenGet g, GetStartOnce(key, wait));
    bool unreachable = !g.replicas.empty();
    for (const ReplicaLocation& r : g.replicas) {
      // Opened once per node and kept by the engine: a lookup after that.
      const Result<SegmentId> seg = engine_->OpenSegment(r.endpoint);
      unreachable = unreachable && !seg.ok() && seg.status().code() == StatusCode::kUnavailable;
    }
    if (!unreachable || backoff.exhausted()) {
      return g;  // The read reports what is wrong, if anything.
    }
    GetEnd(g, false);
    backoff.Sleep();
  }
}

Result<StoreClientImpl::OpenGet> StoreClientImpl::GetStartOnce(std::string_view key,
                                                               std::chrono::milliseconds wait) {
  pb::GetStartRequest req;
  req.set_key(std::string(key));
  req.set_client_endpoint(engine_->endpoint());
  req.set_wait_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(0, wait.count())));
  pb::GetStartResponse resp;
  SLUICE_RETURN_IF_ERROR(Call(&pb::Master::Stub::GetStart, fastlane::Method::kGetStart, req, &resp,
                              "GetStart", config_.rpc_timeout + wait));
  OpenGet g{std::string(key), resp.lease_id(), {resp.size(), std::nullopt}, {}};
  if (resp.has_tensor()) {
    g.meta.tensor = FromProto(resp.tensor());
  }
  for (const pb::Replica& r : resp.replicas()) {
    g.replicas.push_back(FromProto(r));
  }
  return g;
}

void StoreClientImpl::GetEnd(const OpenGet& g, bool completed) {
  if (std::shared_ptr<fastlane::Client> lane = FastLane()) {
    pb::GetEndRequest req;
    req.set_key(g.key);
    req.set_lease_id(g.lease_id);
    req.set_completed(completed);
    if (lane->Send(fastlane::Method::kGetEnd, req.SerializeAsString(), config_.rpc_timeout)) {
      return;
    }
    LaneFailed(lane, UnavailableError("send failed", FailureScope::kEndpoint));
  }
  struct Call {
    std::shared_ptr<pb::Master::Stub> stub;  // Outlives the call when the master moves.
    grpc::ClientContext ctx;
    pb::GetEndRequest req;
    pb::GetEndResponse resp;
  };
  auto* call = new Call;
  call->req.set_key(g.key);
  call->req.set_lease_id(g.lease_id);
  call->req.set_completed(completed);
  SetDeadline(&call->ctx, config_.rpc_timeout);
  {
    MutexLock lock(release_mu_);
    ++releases_in_flight_;
  }
  call->stub = Stub();
  call->stub->async()->GetEnd(&call->ctx, &call->req, &call->resp,
                              [this, call](const grpc::Status&) {
                                delete call;
                                MutexLock lock(release_mu_);
                                if (--releases_in_flight_ == 0) {
                                  release_cv_.NotifyAll();
                                }
                              });
}

Status StoreClientImpl::ReadRange(const OpenGet& g, char* local, std::uint64_t object_offset,
                                  std::uint64_t len) {
  const StoreClient::IoRun run{local, len};
  return ReadRuns(g, {&run, 1}, object_offset);
}

Status StoreClientImpl::ReadRuns(const OpenGet& g, std::span<const StoreClient::IoRun> runs,
                                 std::uint64_t object_offset) {
  Status last = UnavailableError("object '" + g.key + "' has no replica", FailureScope::kEndpoint);
  std::vector<TransferRequest> ops;
  ops.reserve(runs.size());
  for (const ReplicaLocation& r : g.replicas) {
    Result<SegmentId> seg = engine_->OpenSegment(r.endpoint);
    if (!seg.ok()) {
      last = seg.status();
      continue;
    }
    ops.clear();
    std::uint64_t at = r.offset + object_offset;
    for (const auto& run : runs) {
      ops.push_back(TransferRequest{OpKind::kRead, run.data, *seg, RegionKey{r.region_key}, at,
                                    run.len, TransportHint::kAuto});
      at += run.len;
    }
    last = engine_->TransferSync(ops, config_.transfer_timeout);
    if (last.ok() || last.scope() == FailureScope::kRequest) {
      return last;  // Done, or an error another replica would repeat.
    }
  }
  return last.WithContext("get '" + g.key + "'");
}

Status StoreClientImpl::ReadParts(const OpenGet& g, std::span<const StoreClient::IoRun> runs,
                                  std::span<const std::size_t> parts,
                                  const std::function<void(std::size_t)>& landed) {
  if (g.replicas.empty()) {
    return UnavailableError("object '" + g.key + "' has no replica", FailureScope::kEndpoint);
  }
  const ReplicaLocation& r = g.replicas.front();
  SLUICE_ASSIGN_OR_RETURN(SegmentId seg, engine_->OpenSegment(r.endpoint));
  std::vector<std::shared_ptr<TransferBatch>> batches;
  std::vector<TransferRequest> ops;
  Status s;
  std::size_t first = 0;
  std::uint64_t at = r.offset;
  for (std::size_t i = 0; i < parts.size() && s.ok(); ++i) {
    ops.clear();
    for (const auto& run : runs.subspan(first, parts[i])) {
      ops.push_back(TransferRequest{OpKind::kRead, run.data, seg, RegionKey{r.region_key}, at,
                                    run.len, TransportHint::kAuto});
      at += run.len;
    }
    first += parts[i];
    Result<std::shared_ptr<TransferBatch>> b = engine_->Submit(ops);
    if (b.ok()) {
      batches.push_back(std::move(*b));
    } else {
      s = b.status();
    }
  }
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const Status w = batches[i]->Wait(config_.transfer_timeout);
    if (s.ok() && !w.ok()) {
      s = w;
    }
    if (s.ok() && landed) {
      landed(i);
    }
  }
  return s.ok() ? s : s.WithContext("get '" + g.key + "'");
}

Result<ObjectMeta> StoreClientImpl::GetInto(std::string_view key, void* dst, std::size_t capacity) {
  if (dst == nullptr) {
    return InvalidArgumentError("GetInto: null destination");
  }
  return ReadWithVerdict(key, std::chrono::milliseconds(0), [&](const OpenGet& g, bool*) {
    if (g.meta.size > capacity) {  // kRequest: not retried.
      return InvalidArgumentError("GetInto: object '" + g.key + "' has " +
                                  std::to_string(g.meta.size) + " bytes; the buffer holds " +
                                  std::to_string(capacity));
    }
    return ReadRange(g, static_cast<char*>(dst), 0, g.meta.size);
  });
}

Result<std::vector<std::byte>> StoreClientImpl::Get(std::string_view key, ObjectMeta* meta) {
  std::vector<std::byte> out;
  SLUICE_ASSIGN_OR_RETURN(
      ObjectMeta m,
      ReadWithVerdict(key, std::chrono::milliseconds(0), [&](const OpenGet& g, bool*) {
        out.resize(g.meta.size);
        MutexLock lock(staging_mu_);
        char* stage = static_cast<char*>(staging_.data());
        for (std::uint64_t off = 0; off < out.size(); off += staging_.size()) {
          const std::uint64_t n = std::min<std::uint64_t>(staging_.size(), out.size() - off);
          SLUICE_RETURN_IF_ERROR(ReadRange(g, stage, off, n));
          std::memcpy(out.data() + off, stage, n);
          bytes_staged_.fetch_add(n, std::memory_order_relaxed);
        }
        return Status::Ok();
      }));
  if (meta != nullptr) {
    *meta = m;
  }
  return out;
}

std::vector<Result<ObjectMeta>> StoreClientImpl::BatchGetInto(
    std::span<const StoreClient::GetItem> items) {
  std::vector<Result<ObjectMeta>> out;
  out.reserve(items.size());
  std::vector<std::optional<OpenGet>> gets(items.size());
  std::vector<std::shared_ptr<TransferBatch>> batches(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    out.emplace_back(InternalError("not run"));
    const auto& it = items[i];
    Result<OpenGet> g = GetStart(it.key);
    if (!g.ok()) {
      out[i] = g.status();
      continue;
    }
    if (g->meta.size > it.capacity || it.dst == nullptr || g->replicas.empty()) {
      GetEnd(*g, false);
      out[i] = InvalidArgumentError("GetInto '" + it.key + "': buffer of " +
                                    std::to_string(it.capacity) + " bytes for " +
                                    std::to_string(g->meta.size) + " (or no replica)");
      continue;
    }
    gets[i] = std::move(*g);
    const ReplicaLocation& r = gets[i]->replicas.front();
    Result<SegmentId> seg = engine_->OpenSegment(r.endpoint);
    if (seg.ok()) {
      TransferRequest op{OpKind::kRead,           it.dst,   *seg,
                         RegionKey{r.region_key}, r.offset, gets[i]->meta.size,
                         TransportHint::kAuto};
      auto b = engine_->Submit({&op, 1});
      if (b.ok()) {
        batches[i] = *b;
      }
    }
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!gets[i].has_value()) {
      continue;
    }
    Status s = batches[i] ? batches[i]->Wait(config_.transfer_timeout)
                          : UnavailableError("first replica unreachable", FailureScope::kEndpoint);
    if (!s.ok() && s.scope() != FailureScope::kRequest) {
      s = ReadRange(*gets[i], static_cast<char*>(items[i].dst), 0, gets[i]->meta.size);
    }
    GetEnd(*gets[i], s.ok());
    out[i] = s.ok() ? Result<ObjectMeta>(gets[i]->meta) : Result<ObjectMeta>(s);
  }
  return out;
}

}  // namespace sluice::internal
