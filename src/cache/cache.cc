// Single-flight GetOrCompute over store objects (sluice/cache/cache.h).
#include "sluice/cache/cache.h"

#include <algorithm>
#include <thread>

#include "common/log.h"

namespace sluice::cache {
namespace {

using Clock = std::chrono::steady_clock;

// How often a waiter checks that the claim it waits on is still held.
std::chrono::milliseconds PollInterval(std::chrono::milliseconds claim_ttl) {
  return std::clamp(claim_ttl / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(500));
}

}  // namespace

std::string ClaimKey(std::string_view key) {
  return std::string(key) + ".claim";
}

Result<std::unique_ptr<Cache>> Cache::Create(StoreClient* store, CacheOptions options) {
  if (store == nullptr) {
    return InvalidArgumentError("cache: a store client is required");
  }
  if (!IsCacheClassName(options.name)) {
    return InvalidArgumentError("cache: options.name must be 1..32 of [a-z0-9_]");
  }
  if (options.policy.kind != LeaseKind::kCache && options.policy.kind != LeaseKind::kSoftPin) {
    return InvalidArgumentError("cache '" + options.name +
                                "': options.policy must be cache or soft_pin");
  }
  if (options.claim_ttl.count() <= 0 || options.wait_timeout.count() <= 0) {
    return InvalidArgumentError("cache '" + options.name +
                                "': claim_ttl and wait_timeout must be positive");
  }
  return std::unique_ptr<Cache>(new Cache(store, std::move(options)));
}

Cache::Cache(StoreClient* store, CacheOptions options)
    : store_(store), options_(std::move(options)) {}

Result<std::optional<std::vector<std::byte>>> Cache::Read(std::string_view key, bool fetch) {
  if (!fetch) {
    SLUICE_ASSIGN_OR_RETURN(bool there, store_->Exists(key));
    return there ? std::optional<std::vector<std::byte>>(std::vector<std::byte>())
                 : std::optional<std::vector<std::byte>>();
  }
  Result<std::vector<std::byte>> got = store_->Get(key);
  if (got.ok()) {
    return std::optional<std::vector<std::byte>>(std::move(*got));
  }
  // Absent, or being written by whoever computed it: not a value yet.
  if (got.status().code() == StatusCode::kNotFound ||
      got.status().code() == StatusCode::kFailedPrecondition) {
    return std::optional<std::vector<std::byte>>();
  }
  return got.status();
}

Result<std::optional<std::vector<std::byte>>> Cache::Lookup(std::string_view key) {
  lookups_.fetch_add(1, std::memory_order_relaxed);
  SLUICE_ASSIGN_OR_RETURN(std::optional<std::vector<std::byte>> v, Read(key));
  (v.has_value() ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
  return v;
}

Status Cache::Insert(std::string_view key, std::span<const std::byte> value,
                     const std::optional<TensorMeta>& tensor) {
  PutOptions po;
  po.policy = options_.policy;
  po.policy.cache_class = options_.name;  // Counts against its kind's budget.
  po.tensor = tensor;
  Status s = store_->Put(key, value, po);
  if (s.code() == StatusCode::kAlreadyExists) {
    return Status::Ok();
  }
  if (s.ok()) {
    bytes_.fetch_add(value.size(), std::memory_order_relaxed);
  }
  return s;
}

Result<std::vector<std::byte>> Cache::GetOrCompute(std::string_view key, const Compute& compute,
                                                   const std::optional<TensorMeta>& tensor) {
  return Resolve(key, compute, tensor, /*fetch=*/true);
}

Status Cache::Ensure(std::string_view key, const Compute& compute,
                     const std::optional<TensorMeta>& tensor) {
  return Resolve(key, compute, tensor, /*fetch=*/false).status();
}

Result<std::vector<std::byte>> Cache::Resolve(std::string_view key, const Compute& compute,
                                              const std::optional<TensorMeta>& tensor, bool fetch) {
  lookups_.fetch_add(1, std::memory_order_relaxed);
  SLUICE_ASSIGN_OR_RETURN(std::optional<std::vector<std::byte>> hit, Read(key, fetch));
  (hit.has_value() ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
  if (hit.has_value()) {
    return std::move(*hit);
  }
  const std::string claim = ClaimKey(key);
  const std::byte mark[1] = {std::byte{1}};
  PutOptions claim_options;
  claim_options.policy = LeasePolicy::Ttl(options_.claim_ttl);
  const auto deadline = Clock::now() + options_.wait_timeout;
  bool saw_claim = false;
  while (true) {
    Status claimed = store_->Put(claim, mark, claim_options);
    if (claimed.ok()) {
      if (saw_claim) {
        takeovers_.fetch_add(1, std::memory_order_relaxed);
      }
      // The value may have landed between the lookup and the claim.
      Result<std::optional<std::vector<std::byte>>> again = Read(key, fetch);
      if (again.ok() && again->has_value()) {
        (void)store_->Remove(claim);
        waits_.fetch_add(1, std::memory_order_relaxed);
        return std::move(**again);
      }
      computes_.fetch_add(1, std::memory_order_relaxed);
      Result<std::vector<std::byte>> value = compute();
      if (value.ok()) {
        Status stored = Insert(key, *value, tensor);
        if (!stored.ok()) {  // The value is still the caller's; only caching failed.
          SLUICE_LOG(warn, "cache {}: {} not stored: {}", options_.name, key, stored.ToString());
        }
      }
      (void)store_->Remove(claim);  // Best effort: it expires anyway.
      return value;
    }
    if (claimed.code() != StatusCode::kAlreadyExists) {
      return claimed;
    }
    saw_claim = true;
    // Another holds the claim: wait for its value, or for its claim to end.
    while (true) {
      const auto now = Clock::now();
      if (now >= deadline) {
        return Status(StatusCode::kDeadlineExceeded,
                      "cache " + options_.name + ": " + std::string(key) + " not computed within " +
                          std::to_string(options_.wait_timeout.count()) + " ms");
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      Status landed = store_->WaitFor(
          key, std::min(left, PollInterval(options_.claim_ttl)) + std::chrono::milliseconds(1));
      if (landed.ok()) {
        SLUICE_ASSIGN_OR_RETURN(std::optional<std::vector<std::byte>> v, Read(key, fetch));
        if (v.has_value()) {
          waits_.fetch_add(1, std::memory_order_relaxed);
          return std::move(*v);
        }
        continue;  // Evicted at once: wait on.
      }
      if (landed.code() != StatusCode::kDeadlineExceeded) {
        return landed;
      }
      Result<bool> held = store_->Exists(claim);
      if (!held.ok()) {
        return held.status();
      }
      if (!*held) {
        break;  // The claimant finished without a value, or died: claim it.
      }
    }
  }
}

CacheStats Cache::stats() const {
  CacheStats s;
  s.lookups = lookups_.load(std::memory_order_relaxed);
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.computes = computes_.load(std::memory_order_relaxed);
  s.single_flight_waits = waits_.load(std::memory_order_relaxed);
  s.takeovers = takeovers_.load(std::memory_order_relaxed);
  s.bytes_inserted = bytes_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace sluice::cache
