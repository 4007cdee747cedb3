// Role credentials: the keys one role of a cluster holds instead of the
// token, and the text of their files.
#include <sstream>

#include "common/security_keys.h"

namespace sluice {
namespace {

bool KnownRole(std::string_view role) {
  for (const char* r : kCredentialRoles) {
    if (role == r) {
      return true;
    }
  }
  return false;
}

std::string RoleList() {
  std::string out;
  for (const char* r : kCredentialRoles) {
    out += out.empty() ? "" : ", ";
    out += r;
  }
  return out;
}

bool IsKeyHex(std::string_view s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

constexpr std::string_view kHeader =
    "# sluice role credential, made by `sluice token derive`: keep it as secret as the\n"
    "# cluster token (mode 0600). It opens only this role's calls.\n";

}  // namespace

Result<std::string> RoleCredentialText(std::string_view token, std::string_view role) {
  if (token.empty()) {
    return InvalidArgumentError("a role credential is derived from the cluster token; none given");
  }
  if (!KnownRole(role)) {
    return InvalidArgumentError("unknown role \"" + std::string(role) + "\" (one of " + RoleList() +
                                ")");
  }
  std::string out(kHeader);
  out += "role " + std::string(role) + "\n";
  out += "grpc " + internal::RoleGrpcKey(token, role) + "\n";
  if (role != "node") {  // A node makes no store calls.
    out += "fastlane " + internal::DeriveKey(token, internal::kFastLaneKeyPurpose) + "\n";
  }
  out += "transfer " + internal::DeriveKey(token, internal::kTransferKeyPurpose) + "\n";
  return out;
}

namespace internal {

std::string RoleGrpcKey(std::string_view token, std::string_view role) {
  return DeriveKey(token, std::string(kGrpcKeyPurpose) + "/role/" + std::string(role));
}

std::string GrpcCallKey(const SecurityConfig& security) {
  return security.token.empty() ? security.credential.grpc_key
                                : DeriveKey(security.token, kGrpcKeyPurpose);
}

std::string FastLaneKey(const SecurityConfig& security) {
  return security.token.empty() ? security.credential.fast_lane_key
                                : DeriveKey(security.token, kFastLaneKeyPurpose);
}

Result<RoleCredential> ParseRoleCredential(std::string_view text, std::string_view where) {
  RoleCredential c;
  std::istringstream in{std::string(text)};
  std::string line;
  int n = 0;
  const auto bad = [&](const std::string& why) {
    return InvalidArgumentError(std::string(where) + ": line " + std::to_string(n) + ": " + why +
                                " (make the file with `sluice token derive`)");
  };
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    if (line.empty() || line[0] == '#') {
      continue;
    }
    const std::size_t sp = line.find(' ');
    const std::string key = line.substr(0, sp);
    const std::string value = sp == std::string::npos ? "" : line.substr(sp + 1);
    std::string* field = key == "role"       ? &c.role
                         : key == "grpc"     ? &c.grpc_key
                         : key == "fastlane" ? &c.fast_lane_key
                         : key == "transfer" ? &c.transfer_key
                                             : nullptr;
    if (field == nullptr) {
      return bad("unknown entry \"" + key.substr(0, 32) + "\"");
    }
    if (!field->empty()) {
      return bad("\"" + key + "\" given twice");
    }
    if (field == &c.role ? !KnownRole(value) : !IsKeyHex(value)) {
      return bad(field == &c.role ? "role must be one of " + RoleList()
                                  : "\"" + key + "\" must be 64 lowercase hex digits");
    }
    *field = value;
  }
  if (c.role.empty() || c.grpc_key.empty() || c.transfer_key.empty() ||
      (c.role != "node" && c.fast_lane_key.empty())) {
    return InvalidArgumentError(std::string(where) +
                                ": incomplete: want role, grpc, transfer and (but for a node) "
                                "fastlane entries (make the file with `sluice token derive`)");
  }
  return c;
}

}  // namespace internal
}  // namespace sluice
