// Puts: PutStart + write + PutEnd, or one round trip over a reservation.
#include <cstring>

#include "common/mutex.h"
#include "store/client/store_client_impl.h"

namespace sluice::internal {

namespace {

// Placements a put tries when the nodes it is given cannot be reached (a
// node that died and the master has not yet noticed).
constexpr int kPlacementTries = 3;

}  // namespace

Result<StoreClientImpl::OpenPut> StoreClientImpl::PutStart(std::string_view key, std::size_t len,
                                                           const PutOptions& o,
                                                           std::vector<std::string>* unreachable) {
  pb::PutStartRequest req;
  req.set_key(std::string(key));
  req.set_size(len);
  FillPutFields(o, &req);
  req.set_replica_num(o.replica_num);
  req.set_preferred_node(o.preferred_node);
  req.set_client_endpoint(engine_->endpoint());
  if (unreachable != nullptr) {
    for (const std::string& ep : *unreachable) {
      req.add_unreachable(ep);
    }
  }
  pb::PutStartResponse resp;
  SLUICE_RETURN_IF_ERROR(
      Call(&pb::Master::Stub::PutStart, fastlane::Method::kPutStart, req, &resp, "PutStart"));
  OpenPut put{std::string(key), resp.put_id(), {}};
  for (const pb::Replica& r : resp.replicas()) {
    Result<SegmentId> seg = engine_->OpenSegment(r.endpoint());
    if (!seg.ok()) {
      Revoke(put);
      if (unreachable != nullptr && seg.status().code() == StatusCode::kUnavailable) {
        unreachable->push_back(r.endpoint());
      }
      return seg.status().WithContext("put '" + put.key + "': store node " + r.endpoint());
    }
    put.replicas.emplace_back(*seg, FromProto(r));
  }
  return put;
}

Status StoreClientImpl::WriteRange(const OpenPut& put, const char* local,
                                   std::uint64_t object_offset, std::uint64_t len) {
  return engine_->TransferSync(WriteOps(put, local, object_offset, len), config_.transfer_timeout);
}

void StoreClientImpl::Revoke(const OpenPut& put) {
  pb::PutRevokeRequest req;
  req.set_key(put.key);
  req.set_put_id(put.put_id);
  pb::PutRevokeResponse resp;
  // Best effort: the put also times out.
  (void)Call(&pb::Master::Stub::PutRevoke, fastlane::Method::kPutRevoke, req, &resp, "PutRevoke");
}

Status StoreClientImpl::FinishPut(const OpenPut& put, Status written,
                                  const std::optional<pb::ReserveNext>& next,
                                  const std::shared_ptr<fastlane::Client>& lane) {
  if (!written.ok()) {
    Revoke(put);
    return written.WithContext("put '" + put.key + "'");
  }
  pb::PutEndRequest req;
  req.set_key(put.key);
  req.set_put_id(put.put_id);
  if (next.has_value()) {
    *req.mutable_reserve() = *next;
  }
  pb::PutEndResponse resp;
  SLUICE_RETURN_IF_ERROR(
      Call(&pb::Master::Stub::PutEnd, fastlane::Method::kPutEnd, req, &resp, "PutEnd"));
  if (next.has_value()) {
    KeepReservation(lane, resp.reservation(), *next);
  }
  return Status::Ok();
}

template <typename Write>
Status StoreClientImpl::DoPut(std::string_view key, std::uint64_t len, const PutOptions& o,
                              const Write& write) {
  const PutShape shape{len, std::max<std::uint32_t>(1, o.replica_num), o.preferred_node};
  // Reservations ride on the fast lane only: its open connection shows
  // that the master which granted one still runs (a restarted master may
  // have given the space away).
  std::shared_ptr<fastlane::Client> lane = config_.reserve_puts ? FastLane() : nullptr;
  std::vector<std::uint64_t> release;
  std::optional<HeldReservation> held =
      lane != nullptr ? reservations_.Take(shape, std::chrono::steady_clock::now(), &release)
                      : std::nullopt;
  if (held.has_value() && !lane->IdleConnectionAlive()) {
    held.reset();
    reservations_.Clear();
    release.clear();
  }
  Unreserve(lane, release);
  std::optional<pb::ReserveNext> next;
  if (lane != nullptr && reservations_.NotePut(shape)) {
    next.emplace();
    next->set_size(shape.size);
    next->set_replica_num(shape.replica_num);
    next->set_preferred_node(shape.preferred_node);
    next->set_client_endpoint(engine_->endpoint());
  }
  if (held.has_value()) {
    std::optional<Status> done = PutOverReservation(lane, std::move(*held), key, o, write, next);
    if (done.has_value()) {
      return *done;
    }
  }
  // A node the master placed the object on may be unreachable (dead, and
  // not yet timed out at the master): place it again, elsewhere.
  std::vector<std::string> unreachable;
  for (int tries = 1;; ++tries) {
    const std::size_t known = unreachable.size();
    Result<OpenPut> put = PutStart(key, len, o, &unreachable);
    if (!put.ok()) {
      if (unreachable.size() > known && tries < kPlacementTries) {
        continue;
      }
      return put.status();
    }
    Status written = write(*put);
    if (written.code() == StatusCode::kUnavailable && tries < kPlacementTries) {
      Revoke(*put);
      for (const auto& [seg, loc] : put->replicas) {
        unreachable.push_back(loc.endpoint);
      }
      continue;
    }
    return FinishPut(*put, std::move(written), next, lane);
  }
}

template <typename Write>
std::optional<Status> StoreClientImpl::PutOverReservation(
    const std::shared_ptr<fastlane::Client>& lane, HeldReservation held, std::string_view key,
    const PutOptions& o, const Write& write, const std::optional<pb::ReserveNext>& next) {
  OpenPut put{std::string(key), held.id, std::move(held.replicas)};
  if (!write(put).ok()) {
    Unreserve(lane, {put.put_id});
    return std::nullopt;
  }
  pb::PutReservedRequest req;
  req.set_key(put.key);
  req.set_reservation_id(put.put_id);
  req.set_size(held.shape.size);
  FillPutFields(o, &req);
  if (next.has_value()) {
    *req.mutable_reserve() = *next;
  }
  pb::PutReservedResponse resp;
  const Status s = Call(&pb::Master::Stub::PutReserved, fastlane::Method::kPutReserved, req, &resp,
                        "PutReserved");
  if (s.ok()) {
    if (next.has_value()) {
      KeepReservation(lane, resp.reservation(), *next);
    }
    return Status::Ok();
  }
  if (s.code() == StatusCode::kNotFound) {
    return std::nullopt;
  }
  return s.WithContext("put '" + put.key + "'");
}

void StoreClientImpl::Unreserve(const std::shared_ptr<fastlane::Client>& lane,
                                const std::vector<std::uint64_t>& ids) {
  if (lane == nullptr || ids.empty()) {
    return;
  }
  pb::UnreserveRequest req;
  for (std::uint64_t id : ids) {
    req.add_reservation_ids(id);
  }
  (void)lane->Send(fastlane::Method::kUnreserve, req.SerializeAsString(), config_.rpc_timeout);
}

void StoreClientImpl::KeepReservation(const std::shared_ptr<fastlane::Client>& lane,
                                      const pb::Reservation& r, const pb::ReserveNext& asked) {
  if (r.reservation_id() == 0) {
    return;
  }
  const PutShape shape{asked.size(), asked.replica_num(), asked.preferred_node()};
  if (r.size() != shape.size || r.replicas_size() != static_cast<int>(shape.replica_num)) {
    Unreserve(lane, {r.reservation_id()});
    return;
  }
  HeldReservation h;
  h.shape = shape;
  h.id = r.reservation_id();
  for (const pb::Replica& rep : r.replicas()) {
    Result<SegmentId> seg = engine_->OpenSegment(rep.endpoint());
    if (!seg.ok()) {
      Unreserve(lane, {r.reservation_id()});
      return;
    }
    h.replicas.emplace_back(*seg, FromProto(rep));
  }
  // Used only in the first fifth of its ttl, so that a write started then
  // ends long before the master frees the space.
  h.usable_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(r.ttl_ms()) / 5;
  std::vector<std::uint64_t> release;
  reservations_.Keep(std::move(h), &release);
  Unreserve(lane, release);
}

Status StoreClientImpl::PutFrom(std::string_view key, const void* data, std::size_t len,
                                const PutOptions& o) {
  if (data == nullptr) {
    return InvalidArgumentError("PutFrom: null data");
  }
  return DoPut(key, len, o, [&](const OpenPut& put) {
    return WriteRange(put, static_cast<const char*>(data), 0, len);
  });
}

Status StoreClientImpl::Put(std::string_view key, std::span<const std::byte> value,
                            const PutOptions& o) {
  return DoPut(key, value.size(), o, [&](const OpenPut& put) {
    MutexLock lock(staging_mu_);
    char* stage = static_cast<char*>(staging_.data());
    Status s;
    for (std::uint64_t off = 0; s.ok() && off < value.size(); off += staging_.size()) {
      const std::uint64_t n = std::min<std::uint64_t>(staging_.size(), value.size() - off);
      std::memcpy(stage, value.data() + off, n);
      bytes_staged_.fetch_add(n, std::memory_order_relaxed);
      s = WriteRange(put, stage, off, n);
    }
    return s;
  });
}

Status StoreClientImpl::PutFromRuns(std::string_view key, std::span<const StoreClient::IoRun> runs,
                                    const PutOptions& o) {
  std::uint64_t total = 0;
  for (const auto& r : runs) {
    if (r.data == nullptr || r.len == 0) {
      return InvalidArgumentError("PutFromRuns: null or empty run");
    }
    total += r.len;
  }
  return DoPut(key, total, o, [&](const OpenPut& put) {
    std::vector<TransferRequest> ops;
    ops.reserve(runs.size() * put.replicas.size());
    std::uint64_t at = 0;
    for (const auto& r : runs) {
      for (TransferRequest& op : WriteOps(put, r.data, at, r.len)) {
        ops.push_back(op);
      }
      at += r.len;
    }
    return engine_->TransferSync(ops, config_.transfer_timeout);
  });
}

std::vector<Status> StoreClientImpl::BatchPutFrom(std::span<const StoreClient::PutItem> items) {
  std::vector<Status> out(items.size());
  std::vector<std::optional<OpenPut>> puts(items.size());
  std::vector<std::shared_ptr<TransferBatch>> batches(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    Result<OpenPut> p = it.data == nullptr ? Result<OpenPut>(InvalidArgumentError("null data"))
                                           : PutStart(it.key, it.len, it.options);
    if (!p.ok()) {
      out[i] = p.status();
      continue;
    }
    puts[i] = std::move(*p);
    auto b = engine_->Submit(WriteOps(*puts[i], it.data, 0, it.len));
    if (b.ok()) {
      batches[i] = *b;
    } else {
      out[i] = b.status();
    }
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!puts[i].has_value()) {
      continue;
    }
    Status written = batches[i] ? batches[i]->Wait(config_.transfer_timeout) : out[i];
    out[i] = FinishPut(*puts[i], written);
  }
  return out;
}

std::vector<TransferRequest> StoreClientImpl::WriteOps(const OpenPut& put, const void* local,
                                                       std::uint64_t object_offset,
                                                       std::uint64_t len) {
  std::vector<TransferRequest> ops;
  ops.reserve(put.replicas.size());
  for (const auto& [seg, loc] : put.replicas) {
    ops.push_back(TransferRequest{OpKind::kWrite, const_cast<void*>(local), seg,
                                  RegionKey{loc.region_key}, loc.offset + object_offset, len,
                                  TransportHint::kAuto});
  }
  return ops;
}

}  // namespace sluice::internal
