// The proof a gRPC call carries instead of the cluster key: a MAC over the
// call's method, its time and a nonce, under the face's key. The key itself
// never crosses the wire; a captured call cannot be replayed (its nonce is
// remembered for the window) nor replayed late (its time is outside the
// window) nor used for another method.
//
// Header value: "<unix ms>.<nonce: 32 hex>.<HMAC-SHA256: 64 hex>" over
// "sluice grpc call\n<method>\n<unix ms>\n<nonce hex>".
#ifndef SLUICE_COMMON_CALL_MAC_H_
#define SLUICE_COMMON_CALL_MAC_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_set>

#include "sluice/status.h"

#include "common/mutex.h"

namespace sluice::internal {

// The metadata key of a call's proof.
inline constexpr const char* kCallMacMetadataKey = "x-sluice-call-mac";
// The metadata key naming the role whose key signed a call ("worker"...);
// absent on a call signed with the cluster's key (from the token).
inline constexpr const char* kCallRoleMetadataKey = "x-sluice-role";

// The proof for a call of `method` ("/pkg.Service/Method") at `unix_ms`
// with a fresh random nonce.
std::string SignCall(std::string_view key, std::string_view method, std::int64_t unix_ms);

// The nonce of a proof `value` (a view into it), or empty when `value` has
// not the proof's shape. Checks nothing else.
std::string_view ProofNonce(std::string_view value);

// Checks call proofs and remembers their nonces. Thread-safe.
class CallVerifier {
 public:
  // Calls whose time is more than `window` from the verifier's clock are
  // refused (the roles' clocks must agree within it); at most `max_nonces`
  // nonces are remembered (past that the oldest are forgotten early, which
  // shortens the replay window, and the count says so). `key_name` is
  // what a wrong MAC is said to be made without ("a wrong <key_name>").
  CallVerifier(std::string key, std::chrono::milliseconds window = std::chrono::seconds(60),
               std::size_t max_nonces = 1 << 20, std::string key_name = "cluster credential");

  // OK when `value` proves a call of `method` made within the window of
  // `now_unix_ms` whose nonce was not seen before; else kUnauthenticated
  // saying which check failed (malformed, stale, wrong MAC, replayed).
  Status Verify(std::string_view method, std::string_view value, std::int64_t now_unix_ms);

  // True when a proof with `nonce` passed Verify and is still remembered
  // (within its window): how a call's handler learns that the check of its
  // headers ran, without state on the connection's shared auth context.
  bool Remembers(std::string_view nonce) const;

  // Nonces forgotten before their window ended (the cache was full).
  std::uint64_t forgotten_early() const;

 private:
  const std::string key_;
  const std::string key_name_;
  const std::int64_t window_ms_;
  const std::size_t max_nonces_;
  mutable Mutex mu_;
  // Looks nonces up by string_view without making a string.
  struct NonceHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Remembered nonces, and (expiry, nonce) in arrival order for pruning.
  std::unordered_set<std::string, NonceHash, std::equal_to<>> seen_ SLUICE_GUARDED_BY(mu_);
  std::deque<std::pair<std::int64_t, std::string>> order_ SLUICE_GUARDED_BY(mu_);
  std::uint64_t forgotten_early_ SLUICE_GUARDED_BY(mu_) = 0;
};

// Milliseconds since the Unix epoch, from the system clock.
std::int64_t UnixMillis();

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_CALL_MAC_H_
