// Who is calling the HTTP API: API keys to tenants (keys are kept only as
// salted HMAC-SHA256 digests: the file's salt, else a random one), and each
// tenant's submission rate as a token bucket.
#ifndef SLUICE_ORCHESTRATOR_SERVICE_HTTP_ACCESS_H_
#define SLUICE_ORCHESTRATOR_SERVICE_HTTP_ACCESS_H_

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "sluice/orchestrator/server.h"

#include "common/mutex.h"
#include "http/message.h"

namespace sluice::orchestrator {

class HttpAccess {
 public:
  explicit HttpAccess(const AccessConfig& config);

  // Whether any key is configured (else every caller is tenant "").
  bool closed() const { return !digests_.empty(); }
  // The caller's tenant, from "Authorization: Bearer KEY"; nullopt when the
  // API is closed and the key is missing or unknown.
  std::optional<std::string> Tenant(const http::Request& req) const;
  // Takes one submission token of `tenant`'s bucket. False when it is
  // empty; then `*retry_after_s` is when the next token arrives (whole
  // seconds, at least 1). Thread-safe.
  bool AdmitSubmission(const std::string& tenant, int* retry_after_s);

 private:
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point at;
  };
  std::string salt_;
  std::map<std::string, std::string> digests_;  // HashedApiKey(salt_, key) -> tenant.
  std::map<std::string, TenantLimits> limits_;
  Mutex mu_;
  std::map<std::string, Bucket> buckets_ SLUICE_GUARDED_BY(mu_);
};

// 401 in OpenAI's shape, with WWW-Authenticate.
http::Response Unauthorized();

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_HTTP_ACCESS_H_
