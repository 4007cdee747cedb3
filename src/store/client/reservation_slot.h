// The store client's reservation for its next put: space the master holds
// so that a put is one round trip (write, then PutReserved) instead of two
// (PutStart, write, PutEnd). Asked for only when puts repeat one shape (size,
// replica count, placement), as a stage's payloads do; at most one held.
#ifndef SLUICE_STORE_CLIENT_RESERVATION_SLOT_H_
#define SLUICE_STORE_CLIENT_RESERVATION_SLOT_H_

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/store/types.h"
#include "sluice/transfer/engine.h"

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

// Thread-safe.
class ReservationSlot {
 public:
  // Records a put of `shape`. True when the caller should ask for a
  // reservation with it: the previous put had the same shape and none is held.
  bool NotePut(const PutShape& shape) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool repeat = last_.has_value() && *last_ == shape;
    last_ = shape;
    return repeat && !held_.has_value();
  }
  // The held reservation if it fits `shape` and is still usable at `now`;
  // a stale or mismatched one is dropped (the master frees it after its ttl).
  std::optional<HeldReservation> Take(const PutShape& shape,
                                      std::chrono::steady_clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<HeldReservation> h = std::exchange(held_, std::nullopt);
    if (h.has_value() && (h->shape != shape || now >= h->usable_until)) {
      h.reset();
    }
    return h;
  }
  void Keep(HeldReservation h) {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = std::move(h);
  }
  // Forgets the held reservation (the master it came from may be gone).
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    held_.reset();
  }

 private:
  std::mutex mu_;
  std::optional<PutShape> last_;         // Guarded by mu_.
  std::optional<HeldReservation> held_;  // Guarded by mu_.
};

}  // namespace sluice::internal

#endif  // SLUICE_STORE_CLIENT_RESERVATION_SLOT_H_
