#include "orchestrator/service/http_access.h"

#include <algorithm>
#include <cmath>

#include "common/mutex.h"
#include "common/random.h"

namespace sluice::orchestrator {

HttpAccess::HttpAccess(const AccessConfig& config) : salt_(config.salt), limits_(config.tenants) {
  if (salt_.empty()) {
    salt_.resize(32);
    internal::RandomBytes(salt_.data(), salt_.size());
  }
  for (const auto& [key, tenant] : config.keys) {
    digests_[HashedApiKey(salt_, key)] = tenant;
  }
  for (const auto& [digest, tenant] : config.hashed_keys) {
    digests_["hmac-sha256:" + digest] = tenant;
  }
}

std::optional<std::string> HttpAccess::Tenant(const http::Request& req) const {
  if (!closed()) {
    return std::string();
  }
  std::string_view auth = req.Header("authorization");
  constexpr std::string_view kBearer = "bearer ";
  if (auth.size() <= kBearer.size() ||
      !std::equal(kBearer.begin(), kBearer.end(), auth.begin(), [](char a, char b) {
        return a == std::tolower(static_cast<unsigned char>(b));
      })) {
    return std::nullopt;
  }
  auth.remove_prefix(kBearer.size());
  // The lookup compares digests: its timing says nothing about the key.
  auto t = digests_.find(HashedApiKey(salt_, auth));
  return t == digests_.end() ? std::nullopt : std::optional<std::string>(t->second);
}

bool HttpAccess::AdmitSubmission(const std::string& tenant, int* retry_after_s) {
  auto l = limits_.find(tenant);
  if (l == limits_.end() || l->second.requests_per_second <= 0) {
    return true;
  }
  const double rate = l->second.requests_per_second;
  const double burst = l->second.burst > 0 ? l->second.burst : std::max(1.0, 2 * rate);
  const auto now = std::chrono::steady_clock::now();
  MutexLock lock(mu_);
  auto [b, fresh] = buckets_.try_emplace(tenant, Bucket{burst, now});
  Bucket& bucket = b->second;
  if (!fresh) {
    const double elapsed = std::chrono::duration<double>(now - bucket.at).count();
    bucket.tokens = std::min(burst, bucket.tokens + elapsed * rate);
    bucket.at = now;
  }
  if (bucket.tokens >= 1) {
    bucket.tokens -= 1;
    return true;
  }
  *retry_after_s = std::max(1, static_cast<int>(std::ceil((1 - bucket.tokens) / rate)));
  return false;
}

http::Response Unauthorized() {
  http::Response r = http::ErrorResponse(
      401, "invalid_request_error", "missing or unknown API key: send 'Authorization: Bearer KEY'",
      {}, "invalid_api_key");
  r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

}  // namespace sluice::orchestrator
