// AccessConfig::Load: the --api-keys file.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <optional>
#include <set>

#include "sluice/orchestrator/server.h"

#include "common/security_keys.h"

namespace sluice {
namespace {

constexpr std::string_view kHashedPrefix = "hmac-sha256:";

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Lowercase hex to bytes; nullopt when not an even count of hex digits.
std::optional<std::string> FromHex(std::string_view hex) {
  std::string lower(hex);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower.size() % 2 != 0 || !IsLowerHex(lower)) {
    return std::nullopt;
  }
  std::string out(lower.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<char>(std::stoi(lower.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

Status Bad(const std::string& path, const std::string& why) {
  return InvalidArgumentError("api keys file " + path + ": " + why);
}

// A tenant's limits; every field optional, none unknown.
Result<TenantLimits> ParseLimits(const std::string& path, const std::string& tenant,
                                 const YAML::Node& n) {
  if (!n.IsMap()) {
    return Bad(path, "tenants." + tenant + ": a map of limits");
  }
  static const std::set<std::string> kFields = {"requests_per_second", "burst",
                                                "max_jobs_in_flight", "queue_share"};
  TenantLimits l;
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) {
      return Bad(path, "tenants." + tenant + ": limit names are plain words");
    }
    const std::string field = kv.first.as<std::string>();
    const std::string where = "tenants." + tenant + "." + field;
    if (kFields.count(field) == 0) {
      return Bad(path, where +
                           ": unknown (requests_per_second, burst, max_jobs_in_flight, "
                           "queue_share)");
    }
    double v = 0;
    if (!YAML::convert<double>::decode(kv.second, v) || !std::isfinite(v) || v < 0) {
      return Bad(path, where + ": a number >= 0");
    }
    if (field == "requests_per_second") {
      l.requests_per_second = v;
    } else if (field == "burst") {
      l.burst = v;
    } else if (field == "max_jobs_in_flight") {
      if (v != std::floor(v) || v > 1e9) {
        return Bad(path, where + ": a whole number");
      }
      l.max_jobs_in_flight = static_cast<std::size_t>(v);
    } else {
      if (v > 1) {
        return Bad(path, where + ": a share in (0, 1]");
      }
      l.queue_share = v;
    }
  }
  return l;
}

// The parsed file's contents. May throw YAML::Exception (a conversion the
// checks here did not foresee); Load turns that into an error.
Result<AccessConfig> FromYaml(const std::string& path, const YAML::Node& root) {
  if (!root.IsMap()) {
    return Bad(path, "not a map with 'keys' (and 'tenants')");
  }
  AccessConfig c;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) {
      return Bad(path, "top-level names are plain words (keys, tenants)");
    }
    const std::string top = kv.first.as<std::string>();
    if (top != "keys" && top != "tenants" && top != "salt") {
      return Bad(path, top + ": unknown (salt, keys, tenants)");
    }
  }
  if (const YAML::Node salt = root["salt"]) {
    const std::optional<std::string> bytes =
        salt.IsScalar() ? FromHex(salt.as<std::string>()) : std::nullopt;
    if (!bytes.has_value() || bytes->size() < 16 || bytes->size() > 64) {
      return Bad(path, "salt: 16..64 bytes in hex (make one with `openssl rand -hex 16`)");
    }
    c.salt = *bytes;
  }
  const YAML::Node keys = root["keys"];
  if (!keys || !keys.IsMap() || keys.size() == 0) {
    return Bad(path, "keys: a non-empty map of API key -> tenant");
  }
  for (const auto& kv : keys) {
    if (!kv.first.IsScalar() || !kv.second.IsScalar()) {
      return Bad(path, "keys: each entry is KEY: TENANT");
    }
    const std::string key = kv.first.as<std::string>();
    const std::string tenant = kv.second.as<std::string>();
    if (tenant.empty() || tenant.size() > 64) {
      return Bad(path, "keys: tenant names are 1..64 characters");
    }
    if (key.rfind(kHashedPrefix, 0) == 0) {
      const std::string digest = key.substr(kHashedPrefix.size());
      if (digest.size() != 64 || !IsLowerHex(digest)) {
        return Bad(path, "keys: a hashed key is hmac-sha256: and 64 lowercase hex digits");
      }
      if (c.salt.empty()) {
        return Bad(path, "keys: hashed keys need the file's salt");
      }
      c.hashed_keys[digest] = tenant;
      continue;
    }
    if (key.size() < 16) {
      return Bad(path, "keys: a key of " + std::to_string(key.size()) +
                           " characters (at least 16: keys must not be guessable)");
    }
    c.keys[key] = tenant;
  }
  if (const YAML::Node tenants = root["tenants"]) {
    if (!tenants.IsMap()) {
      return Bad(path, "tenants: a map of tenant -> limits");
    }
    for (const auto& kv : tenants) {
      if (!kv.first.IsScalar()) {
        return Bad(path, "tenants: tenant names are plain words");
      }
      const std::string tenant = kv.first.as<std::string>();
      SLUICE_ASSIGN_OR_RETURN(c.tenants[tenant], ParseLimits(path, tenant, kv.second));
    }
  }
  return c;
}

}  // namespace

std::string HashedApiKey(std::string_view salt, std::string_view key) {
  const std::array<std::uint8_t, 32> mac = internal::Hmac(salt, key);
  return std::string(kHashedPrefix) + internal::LowerHex(mac.data(), mac.size());
}

Result<AccessConfig> AccessConfig::Load(const std::string& path) {
  try {  // yaml-cpp reports errors only by exception, parsing or converting.
    return FromYaml(path, YAML::LoadFile(path));
  } catch (const YAML::Exception& e) {
    return Bad(path, e.what());
  }
}

}  // namespace sluice
