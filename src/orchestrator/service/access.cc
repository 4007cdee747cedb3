// AccessConfig::Load: the --api-keys file.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <set>

#include "sluice/orchestrator/server.h"

namespace sluice {
namespace {

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

}  // namespace

Result<AccessConfig> AccessConfig::Load(const std::string& path) {
  YAML::Node root;
  try {  // yaml-cpp reports errors only by exception.
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return Bad(path, e.what());
  }
  if (!root.IsMap()) {
    return Bad(path, "not a map with 'keys' (and 'tenants')");
  }
  AccessConfig c;
  for (const auto& kv : root) {
    const std::string top = kv.first.as<std::string>();
    if (top != "keys" && top != "tenants") {
      return Bad(path, top + ": unknown (keys, tenants)");
    }
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
    if (key.size() < 16) {
      return Bad(path, "keys: a key of " + std::to_string(key.size()) +
                           " characters (at least 16: keys must not be guessable)");
    }
    if (tenant.empty() || tenant.size() > 64) {
      return Bad(path, "keys: tenant names are 1..64 characters");
    }
    c.keys[key] = tenant;
  }
  if (const YAML::Node tenants = root["tenants"]) {
    if (!tenants.IsMap()) {
      return Bad(path, "tenants: a map of tenant -> limits");
    }
    for (const auto& kv : tenants) {
      const std::string tenant = kv.first.as<std::string>();
      SLUICE_ASSIGN_OR_RETURN(c.tenants[tenant], ParseLimits(path, tenant, kv.second));
    }
  }
  return c;
}

}  // namespace sluice
