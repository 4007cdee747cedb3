// The store client's reservations for its next puts: space the master holds
// so that a put is one round trip (write, then PutReserved) instead of two
// (PutStart, write, PutEnd). Asked for only for shapes (size, replica count,
// placement) that recur among the client's recent puts, as a stage's
// payloads and chunks do; at most one held per shape, a few shapes at once.
#ifndef SLUICE_STORE_CLIENT_RESERVATION_CACHE_H_
#define SLUICE_STORE_CLIENT_RESERVATION_CACHE_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/store/types.h"
#include "sluice/transfer/engine.h"

#include "common/mutex.h"

namespace sluice::internal {

struct PutShape {
  std::uint64_t size = 0;
  std::uint32_t replica_num = 1;
  std::string preferred_node;
  bool operator==(const PutShape&) const = default;
};

struct HeldReservation {
  PutShape shape;
  std::uint64_t id = 0;
  std::vector<std::pair<SegmentId, ReplicaLocation>> replicas;
  // A write into the space must start before this (a fraction of the
  // master's ttl, so that it ends long before the master frees the space).
  std::chrono::steady_clock::time_point usable_until;
};

// Thread-safe. Reservations it gives up are returned as ids for the caller
// to release at the master (else they are held there until their ttl).
class ReservationCache {
 public:
  static constexpr std::size_t kMaxShapes = 4;

  // Records a put of `shape`. True when the caller should ask for a
  // reservation with it: the shape is among the last kMaxShapes distinct
  // shapes put and none is held for it.
  bool NotePut(const PutShape& shape) {
    MutexLock lock(mu_);
    auto seen = std::find(recent_.begin(), recent_.end(), shape);
    const bool repeat = seen != recent_.end();
    if (repeat) {
      recent_.erase(seen);
    } else if (recent_.size() == kMaxShapes) {
      recent_.pop_front();
    }
    recent_.push_back(shape);
    return repeat && Find(shape) == held_.end();
  }

  // The reservation held for `shape` if usable at `now`. Reservations that
  // are no longer usable are dropped into `*release`.
  std::optional<HeldReservation> Take(const PutShape& shape,
                                      std::chrono::steady_clock::time_point now,
                                      std::vector<std::uint64_t>* release) {
    MutexLock lock(mu_);
    std::optional<HeldReservation> out;
    for (auto it = held_.begin(); it != held_.end();) {
      if (now >= it->usable_until) {
        release->push_back(it->id);
        it = held_.erase(it);
      } else if (it->shape == shape) {
        out = std::move(*it);
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }

  // Keeps `h`; one held for a shape no longer recent goes to `*release`.
  void Keep(HeldReservation h, std::vector<std::uint64_t>* release) {
    MutexLock lock(mu_);
    auto same = Find(h.shape);
    if (same != held_.end()) {
      release->push_back(same->id);
      held_.erase(same);
    }
    held_.push_back(std::move(h));
    for (auto it = held_.begin(); it != held_.end();) {
      if (std::find(recent_.begin(), recent_.end(), it->shape) == recent_.end()) {
        release->push_back(it->id);
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Forgets every held reservation (the master it came from may be gone).
  void Clear() {
    MutexLock lock(mu_);
    held_.clear();
  }

 private:
  std::vector<HeldReservation>::iterator Find(const PutShape& shape) SLUICE_REQUIRES(mu_) {
    return std::find_if(held_.begin(), held_.end(),
                        [&](const HeldReservation& h) { return h.shape == shape; });
  }

  Mutex mu_;
  std::deque<PutShape> recent_ SLUICE_GUARDED_BY(mu_);        // Distinct, oldest first.
  std::vector<HeldReservation> held_ SLUICE_GUARDED_BY(mu_);  // At most one per recent shape.
};

}  // namespace sluice::internal

#endif  // SLUICE_STORE_CLIENT_RESERVATION_CACHE_H_
