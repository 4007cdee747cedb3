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

Result<AccessConfig> AccessConfig::Load(const std::string& path) {
  try {  // yaml-cpp reports errors only by exception, parsing or converting.
    return FromYaml(path, YAML::LoadFile(path));
  } catch (const YAML::Exception& e) {
    return Bad(path, e.what());
  }
}

}  // namespace sluice
