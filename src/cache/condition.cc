// Encoder declarations, condition keys of a request, and cached inputs
// (sluice/cache/condition.h).
#include "sluice/cache/condition.h"

#include <nlohmann/json.hpp>

namespace sluice::cache {
namespace {

using nlohmann::json;

constexpr std::string_view kCachedInputMagic = "sluice-cached-input-v1\n";

}  // namespace

Status Validate(const ConditionEncoder& e) {
  if (e.id.empty() || e.version.empty()) {
    return InvalidArgumentError("condition encoder: id and version must not be empty");
  }
  if (e.text_fields.empty()) {
    return InvalidArgumentError("condition encoder '" + e.id + "': no text fields");
  }
  for (const std::string& f : e.text_fields) {
    if (f.empty() || f.size() > 64) {
      return InvalidArgumentError("condition encoder '" + e.id +
                                  "': a text field name must be 1..64 bytes");
    }
  }
  // The params are checked the way every key checks them.
  return ConditionKey(e.id, e.version, "", e.params).status();
}

Result<std::vector<std::string>> ConditionKeysFor(const ConditionEncoder& e,
                                                  std::string_view request_json) {
  SLUICE_RETURN_IF_ERROR(Validate(e));
  const json j = json::parse(request_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return InvalidArgumentError("condition keys: the request is not a JSON object");
  }
  std::string scope;
  if (auto it = j.find(kCacheScopeField); it != j.end()) {
    if (!it->is_string()) {
      return InvalidArgumentError("condition keys: request field '" +
                                  std::string(kCacheScopeField) + "' is not a string");
    }
    scope = it->get<std::string>();
  }
  std::vector<std::string> keys;
  keys.reserve(e.text_fields.size());
  for (const std::string& f : e.text_fields) {
    std::string text;
    if (auto it = j.find(f); it != j.end()) {
      if (!it->is_string()) {
        return InvalidArgumentError("condition keys: request field '" + f + "' is not a string");
      }
      text = it->get<std::string>();
    }
    SLUICE_ASSIGN_OR_RETURN(std::string k, ConditionKey(e.id, e.version, text, e.params, scope));
    keys.push_back(std::move(k));
  }
  return keys;
}

std::string ParamsToJson(std::span<const Field> params) {
  json out = json::object();
  for (const Field& f : params) {
    std::visit([&](const auto& v) { out[f.name] = v; }, f.value);
  }
  return out.dump();
}

Result<std::vector<Field>> ParamsFromJson(std::string_view text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return InvalidArgumentError("encoder params: want a JSON object");
  }
  std::vector<Field> out;
  for (const auto& [name, v] : j.items()) {
    Field f{name, std::string()};
    if (v.is_string()) {
      f.value = v.get<std::string>();
    } else if (v.is_number_integer()) {
      f.value = v.get<std::int64_t>();
    } else if (v.is_number_float()) {
      f.value = v.get<double>();
    } else if (v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const json& x) {
                 return x.is_number_integer();
               })) {
      f.value = v.get<std::vector<std::int64_t>>();
    } else if (v.is_array() && !v.empty() &&
               std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); })) {
      f.value = v.get<std::vector<std::string>>();
    } else {
      return InvalidArgumentError("encoder params: '" + name +
                                  "' must be a string, a number or a non-empty array of "
                                  "integers or of strings");
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::string EncodeCachedInput(std::span<const std::string> keys) {
  std::string out(kCachedInputMagic);
  for (const std::string& k : keys) {
    out += k;
    out += '\n';
  }
  return out;
}

bool IsCachedInput(std::string_view input) {
  return input.substr(0, kCachedInputMagic.size()) == kCachedInputMagic;
}

Result<std::vector<std::string>> DecodeCachedInput(std::string_view input) {
  if (!IsCachedInput(input)) {
    return InvalidArgumentError("input: not a cached input");
  }
  input.remove_prefix(kCachedInputMagic.size());
  std::vector<std::string> keys;
  while (!input.empty()) {
    const std::size_t nl = input.find('\n');
    const std::string_view k = input.substr(0, nl);
    if (k.empty()) {
      return InvalidArgumentError("input: a cached input holds an empty key");
    }
    keys.emplace_back(k);
    input.remove_prefix(nl == std::string_view::npos ? input.size() : nl + 1);
  }
  if (keys.empty()) {
    return InvalidArgumentError("input: a cached input names no key");
  }
  return keys;
}

}  // namespace sluice::cache
