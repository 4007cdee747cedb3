// Reservations: space held for a client's next put, so that the put is one
// round trip (write into the reservation, then PutReserved) instead of two.
#include <algorithm>

#include "store/master/master_state.h"
#include "store/master/master_state_types.h"

namespace sluice::internal {
namespace {

// Reservations together hold at most this fraction (1/n) of memory.
constexpr std::uint64_t kMaxReservedShare = 8;

}  // namespace

Result<PutGrant> MasterState::Reserve(const PutRequest& req, TimePoint now) {
  if (req.size == 0) {
    return InvalidArgumentError("Reserve: size must be > 0");
  }
  SLUICE_RETURN_IF_ERROR(CheckPlacement(req));
  if (options_.reservation_timeout.count() <= 0) {
    return ResourceExhaustedError("Reserve: reservations are off");
  }
  if (reservations_.size() >= options_.max_reservations) {
    return ResourceExhaustedError("Reserve: " + std::to_string(reservations_.size()) +
                                  " reservations are open");
  }
  PutRequest r = req;
  r.replica_num = std::max<std::uint32_t>(1, req.replica_num);
  const std::uint64_t bytes = r.size * r.replica_num;
  // Past the high watermark only when the put it stands for, evicting at
  // its commit as PutStart does (LRU order as of then), gets back under it:
  // nothing is evicted early, and the headroom above the watermark is never
  // held for a put that could not free it.
  const auto [used, cap] = MemoryUsage();
  const double over =
      static_cast<double>(used + bytes) - options_.high_watermark * static_cast<double>(cap);
  if (over > 0 &&
      static_cast<double>(EvictableBytes(static_cast<std::uint64_t>(over) + 1)) < over) {
    return ResourceExhaustedError(
        "Reserve: memory would pass the high watermark, and too little is evictable");
  }
  if (reserved_bytes_ + bytes > cap / kMaxReservedShare) {
    return ResourceExhaustedError("Reserve: reservations hold 1/" +
                                  std::to_string(kMaxReservedShare) + " of memory");
  }
  auto obj = std::make_unique<Object>();
  obj->size = r.size;
  obj->put_id = options_.id_salt + next_id_++;
  obj->put_deadline = now + options_.reservation_timeout;
  if (!TryPlace(*obj, r, /*skip_unreachable=*/false)) {
    return ResourceExhaustedError("Reserve: no free extent of " + std::to_string(r.size) +
                                  " bytes");
  }
  PutGrant g = GrantOf(*obj);
  reserved_bytes_ += bytes;
  reservations_[obj->put_id] = std::move(obj);
  return g;
}

Status MasterState::PutReserved(const PutRequest& req, std::uint64_t reservation_id,
                                TimePoint now) {
  SLUICE_RETURN_IF_ERROR(CheckPut(req));
  auto existing = objects_.find(req.key);
  if (existing != objects_.end()) {
    const Object& o = *existing->second;
    if (o.complete && o.put_id == reservation_id && o.request_id == req.request_id) {
      return Status::Ok();  // A retry of a PutReserved that succeeded.
    }
  }
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) {
    return NotFoundError("no reservation " + std::to_string(reservation_id) +
                         " (expired, its node was lost, or the master restarted): put again");
  }
  if (it->second->size != req.size) {
    const std::uint64_t size = it->second->size;
    FreeReservation(it);
    return InvalidArgumentError("PutReserved: " + std::to_string(req.size) +
                                " bytes do not match reservation of " + std::to_string(size));
  }
  if (existing != objects_.end()) {
    FreeReservation(it);
    return AlreadyExistsError(
        "key '" + req.key + "' " +
        (existing->second->complete ? "is already committed" : "is being written"));
  }
  std::unique_ptr<Object> obj = std::move(it->second);
  reservations_.erase(it);
  reserved_bytes_ -= obj->size * obj->replicas.size();
  obj->key = req.key;
  obj->tensor = req.tensor;
  obj->policy = req.policy;
  obj->request_id = req.request_id;
  Object& o = *obj;
  objects_[req.key] = std::move(obj);
  ++counters_.reserved_puts;
  Commit(o, now);
  EvictToLowWatermark(&o);  // As PutStart does, once the space is taken.
  return Status::Ok();
}

void MasterState::Unreserve(std::uint64_t reservation_id) {
  auto it = reservations_.find(reservation_id);
  if (it != reservations_.end()) {
    FreeReservation(it);
  }
}

void MasterState::FreeReservation(
    std::unordered_map<std::uint64_t, std::unique_ptr<Object>>::iterator it) {
  reserved_bytes_ -= it->second->size * it->second->replicas.size();
  FreeTiers(it->second.get());
  reservations_.erase(it);
}

bool MasterState::ReclaimReservations(TimePoint now) {
  bool freed = false;
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    if (now > it->second->put_deadline - options_.reservation_timeout / 2) {
      FreeReservation(it++);
      freed = true;
    } else {
      ++it;
    }
  }
  return freed;
}

void MasterState::ExpireReservations(TimePoint now) {
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    if (now > it->second->put_deadline) {
      ++counters_.lease_expiries;
      FreeReservation(it++);
    } else {
      ++it;
    }
  }
}

}  // namespace sluice::internal
