#include "sluice_cli/config.h"

#include <yaml-cpp/yaml.h>

#include <set>

namespace sluice::cli {
namespace {

// The long flags already on the command line ("--name" or "--name=value").
std::set<std::string> GivenFlags(const std::vector<std::string>& args) {
  std::set<std::string> given;
  for (const std::string& a : args) {
    if (a.rfind("--", 0) == 0) {
      given.insert(
          a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2));
    }
  }
  return given;
}

Status AddKey(const std::string& file, const std::string& key, const YAML::Node& value,
              std::vector<std::string>& out) {
  const std::string flag = "--" + key;
  auto scalar = [&](const YAML::Node& v) -> Status {
    if (!v.IsScalar()) {
      return InvalidArgumentError(file + ": '" + key + "' must be a scalar or a list of scalars");
    }
    const std::string s = v.Scalar();
    if (v.Tag() != "!" && (s == "true" || s == "false")) {  // Unquoted booleans are flags.
      if (s == "true") {
        out.push_back(flag);
      }
      return Status::Ok();
    }
    out.push_back(flag);
    out.push_back(s);
    return Status::Ok();
  };
  if (value.IsSequence()) {
    for (const YAML::Node& v : value) {
      SLUICE_RETURN_IF_ERROR(scalar(v));
    }
    return Status::Ok();
  }
  return scalar(value);
}

Status AppendSectionOrThrow(const std::string& file, const std::string& role,
                            const std::set<std::string>& given, std::vector<std::string>& out) {
  const YAML::Node root = YAML::LoadFile(file);
  if (!root.IsMap()) {
    return InvalidArgumentError("--config " + file + ": expected a map of role sections");
  }
  const YAML::Node section = root[role];
  if (!section) {
    return InvalidArgumentError("--config " + file + ": no '" + role + "' section");
  }
  if (!section.IsMap()) {
    return InvalidArgumentError("--config " + file + ": section '" + role + "' must be a map");
  }
  for (const auto& kv : section) {
    const std::string key = kv.first.as<std::string>();
    if (key.empty() || key == "config" || key.find_first_of(" =") != std::string::npos) {
      return InvalidArgumentError("--config " + file + ": bad key '" + key + "' in '" + role + "'");
    }
    if (given.count(key) == 0) {
      SLUICE_RETURN_IF_ERROR(AddKey("--config " + file, key, kv.second, out));
    }
  }
  return Status::Ok();
}

// yaml-cpp reports errors by exception; none escapes this function.
Status AppendSection(const std::string& file, const std::string& role,
                     const std::set<std::string>& given, std::vector<std::string>& out) {
  try {
    return AppendSectionOrThrow(file, role, given, out);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError("--config " + file + ": " + e.what());
  }
}

}  // namespace

Result<std::vector<std::string>> ExpandConfig(const std::vector<std::string>& args,
                                              const std::set<std::string>& roles) {
  std::string role;
  for (const std::string& a : args) {
    if (roles.count(a) != 0) {
      role = a;
      break;
    }
  }
  std::vector<std::string> rest;
  std::vector<std::string> files;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) {
        return InvalidArgumentError("--config: needs a file");
      }
      files.push_back(args[++i]);
    } else if (args[i].rfind("--config=", 0) == 0) {
      files.push_back(args[i].substr(9));
    } else {
      rest.push_back(args[i]);
    }
  }
  if (!files.empty() && role.empty()) {
    return InvalidArgumentError(
        "--config: goes with a role (serve, master, store-node, "
        "orchestrator, worker, generate)");
  }
  const std::set<std::string> given = GivenFlags(rest);
  for (const std::string& f : files) {
    SLUICE_RETURN_IF_ERROR(AppendSection(f, role, given, rest));
  }
  return rest;
}

}  // namespace sluice::cli
