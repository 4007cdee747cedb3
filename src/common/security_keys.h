// Keys derived from the cluster token, one per face, so a key seen on one
// face (a gRPC bearer key, say) opens no other and never reveals the token;
// and the log of refused peers every face shares.
#ifndef SLUICE_COMMON_SECURITY_KEYS_H_
#define SLUICE_COMMON_SECURITY_KEYS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/security.h"

#include "common/mutex.h"

namespace sluice::internal {

// Faces with a key of their own.
inline constexpr std::string_view kGrpcKeyPurpose = "grpc";
inline constexpr std::string_view kFastLaneKeyPurpose = "fastlane";
inline constexpr std::string_view kTransferKeyPurpose = "transfer";

// HMAC-SHA256(token, "sluice-v1/" + purpose) as 64 lowercase hex digits;
// empty when `token` is.
std::string DeriveKey(std::string_view token, std::string_view purpose);

// The gRPC key of a role credential for `role` ("node", ...): opens only
// that role's methods. Empty when `token` is.
std::string RoleGrpcKey(std::string_view token, std::string_view role);

// The credential in `text` (RoleCredentialText's format); errors
// (kInvalidArgument) begin with `where` ("--role-credential FILE").
Result<RoleCredential> ParseRoleCredential(std::string_view text, std::string_view where);

// The key `security` signs its gRPC calls with: the cluster's (from the
// token: every method) or its role credential's; empty when open.
std::string GrpcCallKey(const SecurityConfig& security);
// The store fast lane's key: from the token or the role credential's
// (empty for a node's credential, and when open).
std::string FastLaneKey(const SecurityConfig& security);

// `n` bytes at `p` as 2n lowercase hex digits.
std::string LowerHex(const std::uint8_t* p, std::size_t n);

// HMAC-SHA256(key, data).
std::array<std::uint8_t, 32> Hmac(std::string_view key, std::string_view data);

// HMAC-SHA256 under one key, again and again: the key is set up once, and
// each MAC covers its parts one after another without joining them. For
// per-frame MACs. Move-only; not thread-safe.
class KeyedHmac {
 public:
  KeyedHmac() = default;  // No key: valid() is false.
  explicit KeyedHmac(std::string_view key);
  // False when default-made or OpenSSL could not set the key up.
  bool valid() const { return ctx_ != nullptr; }
  // The MAC of `parts` into `out`; false when OpenSSL failed.
  bool Compute(std::initializer_list<std::string_view> parts,
               std::array<std::uint8_t, 32>* out) const;

 private:
  struct Free {
    void operator()(void* ctx) const;
  };
  std::unique_ptr<void, Free> ctx_;  // EVP_MAC_CTX.
};

// Equality in time independent of where the inputs differ.
bool SecureEquals(std::string_view a, std::string_view b);

// Counts refused peers and logs them (a warning naming the face, the peer's
// address and why) at most once a second, with the count not logged since:
// a stranger retrying in a loop cannot flood the log. Thread-safe.
class RefusalLog {
 public:
  explicit RefusalLog(std::string face) : face_(std::move(face)) {}
  void Refused(std::string_view peer, std::string_view why);
  std::uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  const std::string& face() const { return face_; }

 private:
  const std::string face_;
  std::atomic<std::uint64_t> count_{0};
  Mutex mu_;
  std::chrono::steady_clock::time_point last_ SLUICE_GUARDED_BY(mu_);
  std::uint64_t unlogged_ SLUICE_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_SECURITY_KEYS_H_
