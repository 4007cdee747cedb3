#include "discovery/etcd_auth.h"

#include <nlohmann/json.hpp>

#include "discovery/membership.h"

namespace sluice::discovery {
namespace {

using nlohmann::json;

bool AlreadyExists(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument &&
         s.message().find("already exists") != std::string_view::npos;
}

// Adds user `name` with `password`, or sets its password when it exists.
Status AddUser(EtcdClient* etcd, const std::string& name, const std::string& password) {
  Status s =
      etcd->Post("/v3/auth/user/add", json{{"name", name}, {"password", password}}.dump()).status();
  if (AlreadyExists(s)) {
    s = etcd->Post("/v3/auth/user/changepw", json{{"name", name}, {"password", password}}.dump())
            .status();
  }
  return s;
}

Status AddRole(EtcdClient* etcd, const std::string& name) {
  Status s = etcd->Post("/v3/auth/role/add", json{{"name", name}}.dump()).status();
  return AlreadyExists(s) ? Status::Ok() : s;
}

Status Named(const Status& s, const std::string& what) {
  return s.ok() ? s
                : Status(s.code(), "etcd auth set-up: " + what + ": " + std::string(s.message()));
}

}  // namespace

std::vector<EtcdGrant> EtcdGrantsOf(const std::string& cluster, std::string_view role) {
  const std::string master = LeaderKey(cluster, "master");
  const std::string orchestrator = LeaderKey(cluster, "orchestrator");
  if (role == "master") {
    return {{RoleKey(cluster, "master") + "/", true, true}};
  }
  if (role == "orchestrator") {
    return {{RoleKey(cluster, "orchestrator") + "/", true, true}, {master, false, false}};
  }
  if (role == "node") {
    return {{master, false, false}};
  }
  if (role == "worker") {
    return {{master, false, false}, {orchestrator, false, false}};
  }
  return {};
}

std::string EtcdUserOf(const std::string& cluster, std::string_view role) {
  return "sluice-" + cluster + "-" + std::string(role);
}

Status SetUpEtcdAuth(EtcdClient* etcd, const std::string& cluster, const std::string& root_password,
                     const std::map<std::string, std::string>& passwords) {
  if (root_password.empty()) {
    return InvalidArgumentError("etcd auth set-up: an empty root password");
  }
  for (const auto& [role, password] : passwords) {
    if (EtcdGrantsOf(cluster, role).empty()) {
      return InvalidArgumentError("etcd auth set-up: no sluice role \"" + role +
                                  "\" (master, orchestrator, node, worker)");
    }
    if (password.empty()) {
      return InvalidArgumentError("etcd auth set-up: an empty password for " + role);
    }
  }
  SLUICE_RETURN_IF_ERROR(Named(AddUser(etcd, "root", root_password), "user root"));
  SLUICE_RETURN_IF_ERROR(Named(AddRole(etcd, "root"), "role root"));
  SLUICE_RETURN_IF_ERROR(Named(
      etcd->Post("/v3/auth/user/grant", json{{"user", "root"}, {"role", "root"}}.dump()).status(),
      "granting root"));
  for (const auto& [role, password] : passwords) {
    const std::string name = EtcdUserOf(cluster, role);
    SLUICE_RETURN_IF_ERROR(Named(AddRole(etcd, name), "role " + name));
    for (const EtcdGrant& g : EtcdGrantsOf(cluster, role)) {
      json perm = {{"permType", g.write ? "READWRITE" : "READ"}, {"key", EtcdBase64(g.key)}};
      if (g.prefix) {
        perm["range_end"] = EtcdBase64(EtcdPrefixEnd(g.key));
      }
      SLUICE_RETURN_IF_ERROR(Named(
          etcd->Post("/v3/auth/role/grant", json{{"name", name}, {"perm", perm}}.dump()).status(),
          "granting " + name + " " + g.key));
    }
    SLUICE_RETURN_IF_ERROR(Named(AddUser(etcd, name, password), "user " + name));
    SLUICE_RETURN_IF_ERROR(Named(
        etcd->Post("/v3/auth/user/grant", json{{"user", name}, {"role", name}}.dump()).status(),
        "granting " + name + " its role"));
  }
  return Named(etcd->Post("/v3/auth/enable", "{}").status(), "enabling auth");
}

}  // namespace sluice::discovery
