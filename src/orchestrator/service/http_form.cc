#include "orchestrator/service/http_form.h"

#include <charconv>
#include <set>

#include "nlohmann/json.hpp"

namespace sluice::orchestrator {
namespace {

using json = nlohmann::json;

// A number in full, or nothing.
bool ParseNumber(const std::string& text, double* out) {
  const char* b = text.data();
  const char* e = b + text.size();
  auto [end, ec] = std::from_chars(b, e, *out);
  return ec == std::errc() && end == e && b != e;
}

// The value of a bracketed field: a number when it reads as one, else text
// (the request's checks name what is wrong with either).
json BracketValue(const std::string& text) {
  double d = 0;
  return ParseNumber(text, &d) ? json(d) : json(text);
}

// `name` = `step_cache[FIELD]` or `lora[][FIELD]` into `j`; `as_text`:
// the object fields already given whole, as JSON text.
Status AddBracketed(const std::string& name, const std::string& text,
                    const std::set<std::string>& as_text, json& j) {
  const std::string kStepCache = "step_cache[";
  const std::string kLora = "lora[][";
  for (const std::string& whole : as_text) {
    if (name.starts_with(whole + "[")) {
      return InvalidArgumentError(name + ": " + whole + " given twice (as JSON and in brackets)");
    }
  }
  if (name.starts_with(kStepCache) && name.ends_with("]")) {
    const std::string field = name.substr(kStepCache.size(), name.size() - kStepCache.size() - 1);
    json& sc = j["step_cache"];
    if (!sc.is_null() && !sc.is_object()) {
      return InvalidArgumentError("step_cache: given twice");
    }
    if (field.empty() || (sc.is_object() && sc.contains(field))) {
      return InvalidArgumentError(name + ": given twice or unnamed");
    }
    sc[field] = BracketValue(text);
    return Status::Ok();
  }
  if (name.starts_with(kLora) && name.ends_with("]")) {
    const std::string field = name.substr(kLora.size(), name.size() - kLora.size() - 1);
    if (field.empty()) {
      return InvalidArgumentError(name + ": names no field of an adapter");
    }
    json& lora = j["lora"];
    if (!lora.is_null() && !lora.is_array()) {
      return InvalidArgumentError("lora: given twice");
    }
    if (lora.is_null() || lora.empty() || lora.back().contains(field)) {
      lora.push_back(json::object());  // A repeated field starts the next adapter.
    }
    lora.back()[field] = BracketValue(text);
    return Status::Ok();
  }
  return InvalidArgumentError(name + ": not a field this form takes");
}

}  // namespace

Result<std::string> FormAsJson(std::vector<http::FormPart> parts, const std::string& picture_field,
                               const std::string& job, std::string* picture) {
  static const std::set<std::string> kIntegers = {"n",    "frames",      "fps",          "steps",
                                                  "seed", "deadline_ms", "preview_every"};
  static const std::set<std::string> kNumbers = {"strength", "guidance"};
  static const std::set<std::string> kObjects = {"step_cache", "lora"};
  json j = json::object();
  std::set<std::string> as_text;  // Object fields given whole.
  bool have_picture = false;
  for (http::FormPart& p : parts) {
    if (p.name == "mask") {
      return InvalidArgumentError(
          "mask: not served (the whole picture is redrawn, as much as strength says)");
    }
    if (p.name == picture_field || p.name == picture_field + "[]") {
      if (have_picture) {
        return InvalidArgumentError(picture_field + ": one picture per " + job);
      }
      if (p.data.size() > kMaxFormPictureBytes) {
        return InvalidArgumentError(picture_field + ": " + std::to_string(p.data.size()) +
                                    " bytes; at most 4 MiB");
      }
      have_picture = true;
      *picture = std::move(p.data);
      continue;
    }
    if (p.is_file()) {
      return InvalidArgumentError(p.name + ": a file where a text field is expected");
    }
    if (p.name.find('[') != std::string::npos) {
      SLUICE_RETURN_IF_ERROR(AddBracketed(p.name, p.data, as_text, j));
      continue;
    }
    if (j.contains(p.name)) {
      return InvalidArgumentError(p.name + ": given twice");
    }
    if (kObjects.count(p.name) != 0) {
      json v = json::parse(p.data, nullptr, /*allow_exceptions=*/false);
      const bool want_array = p.name == "lora";
      if (v.is_discarded() || (want_array ? !v.is_array() : !v.is_object())) {
        return InvalidArgumentError(
            p.name + ": not a JSON " + std::string(want_array ? "array" : "object") +
            " (or send its fields as " + p.name + (want_array ? "[][name]" : "[threshold]") + ")");
      }
      j[p.name] = std::move(v);
      as_text.insert(p.name);
      continue;
    }
    const char* b = p.data.data();
    const char* e = b + p.data.size();
    std::int64_t n = 0;
    double d = 0;
    if (auto [end, ec] = std::from_chars(b, e, n);
        kIntegers.count(p.name) != 0 && ec == std::errc() && end == e) {
      j[p.name] = n;
    } else if (kNumbers.count(p.name) != 0 && ParseNumber(p.data, &d)) {
      j[p.name] = d;
    } else if (p.name == "async") {
      j[p.name] = p.data == "true" ? json(true) : p.data == "false" ? json(false) : json(p.data);
    } else {
      j[p.name] = std::move(p.data);
    }
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace sluice::orchestrator
