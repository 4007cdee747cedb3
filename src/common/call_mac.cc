#include "common/call_mac.h"

#include <charconv>

#include "common/random.h"
#include "common/security_keys.h"

namespace sluice::internal {
namespace {

constexpr std::size_t kNonceBytes = 16;

std::string Mac(std::string_view key, std::string_view method, std::string_view ms,
                std::string_view nonce) {
  std::string data = "sluice grpc call\n";
  data.append(method).append("\n").append(ms).append("\n").append(nonce);
  const std::array<std::uint8_t, 32> mac = Hmac(key, data);
  return LowerHex(mac.data(), mac.size());
}

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

// "<ms>.<nonce>.<mac>" into its parts (views into `value`); false when
// it has not that shape (the nonce's length included).
bool SplitProof(std::string_view value, std::string_view* ms, std::string_view* nonce,
                std::string_view* mac) {
  const std::size_t dot1 = value.find('.');
  const std::size_t dot2 = dot1 == std::string_view::npos ? dot1 : value.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos || dot2 - dot1 - 1 != 2 * kNonceBytes) {
    return false;
  }
  *ms = value.substr(0, dot1);
  *nonce = value.substr(dot1 + 1, dot2 - dot1 - 1);
  *mac = value.substr(dot2 + 1);
  return true;
}

}  // namespace

std::int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string SignCall(std::string_view key, std::string_view method, std::int64_t unix_ms) {
  std::uint8_t nonce[kNonceBytes];
  RandomBytes(nonce, sizeof(nonce));
  const std::string ms = std::to_string(unix_ms);
  const std::string n = LowerHex(nonce, sizeof(nonce));
  return ms + "." + n + "." + Mac(key, method, ms, n);
}

std::string_view ProofNonce(std::string_view value) {
  std::string_view ms, nonce, mac;
  return SplitProof(value, &ms, &nonce, &mac) ? nonce : std::string_view();
}

CallVerifier::CallVerifier(std::string key, std::chrono::milliseconds window,
                           std::size_t max_nonces, std::string key_name)
    : key_(std::move(key)),
      key_name_(std::move(key_name)),
      window_ms_(window.count()),
      max_nonces_(max_nonces) {}

Status CallVerifier::Verify(std::string_view method, std::string_view value,
                            std::int64_t now_unix_ms) {
  std::string_view ms, nonce, mac;
  if (!SplitProof(value, &ms, &nonce, &mac)) {
    return UnauthenticatedError("a malformed call proof");
  }
  std::int64_t at = 0;
  const auto [end, ec] = std::from_chars(ms.data(), ms.data() + ms.size(), at);
  if (ec != std::errc() || end != ms.data() + ms.size() || ms.empty() || !IsLowerHex(nonce) ||
      mac.size() != 64) {
    return UnauthenticatedError("a malformed call proof");
  }
  if (!SecureEquals(mac, Mac(key_, method, ms, nonce))) {
    return UnauthenticatedError("a wrong " + key_name_);
  }
  if (at < now_unix_ms - window_ms_ || at > now_unix_ms + window_ms_) {
    return UnauthenticatedError("a call proof outside the time window (are the clocks in step?)");
  }
  MutexLock lock(mu_);
  while (!order_.empty() && order_.front().first < now_unix_ms) {
    seen_.erase(order_.front().second);
    order_.pop_front();
  }
  if (!seen_.insert(std::string(nonce)).second) {
    return UnauthenticatedError("a replayed call");
  }
  order_.emplace_back(at + window_ms_, std::string(nonce));
  while (order_.size() > max_nonces_) {
    seen_.erase(order_.front().second);
    order_.pop_front();
    ++forgotten_early_;
  }
  return Status::Ok();
}

bool CallVerifier::Remembers(std::string_view nonce) const {
  MutexLock lock(mu_);
  return seen_.find(nonce) != seen_.end();
}

std::uint64_t CallVerifier::forgotten_early() const {
  MutexLock lock(mu_);
  return forgotten_early_;
}

}  // namespace sluice::internal
