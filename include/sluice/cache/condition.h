// sluice/cache/condition.h
//
// What lets a job skip its encode stage: an encoder's declared identity
// (from which anyone holding a request computes the condition keys its
// texts would be cached under), and a stage input that names cache entries
// instead of carrying a payload.
//
// An encode worker declares its ConditionEncoder when it registers; the
// orchestrator computes each job's condition keys from it and, when every
// one is cached, hands the next stage a cached input naming them (no
// encode dispatch). An encode stage with a cache hands on the same input,
// so the next stage reads every condition from the cache either way.

#ifndef SLUICE_CACHE_CONDITION_H_
#define SLUICE_CACHE_CONDITION_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/cache/keys.h"
#include "sluice/status.h"

namespace sluice::cache {

struct ConditionEncoder {
  std::string id;       // e.g. "sluice-reference-text".
  std::string version;  // Changes whenever its output would.
  // Its settings that change its output (max length, dtype, ...).
  std::vector<Field> params;
  // The request's JSON fields it encodes, in the order the next stage
  // expects them (e.g. "prompt", "negative_prompt"). A field the request
  // does not have is encoded as the empty text.
  std::vector<std::string> text_fields;
};

// Errors: kInvalidArgument naming an empty id, version or text field
// list, a text field that is not 1..64 bytes, or a malformed parameter.
Status Validate(const ConditionEncoder& e);

// The request field naming whose condition-cache entries a job's keys are
// (ConditionKey's `scope`): the orchestrator sets it to the submitting
// tenant (whatever a client sent is replaced), or removes it when the
// deployment shares entries across tenants.
inline constexpr std::string_view kCacheScopeField = "cache_scope";

// The condition keys of `request_json` (a JSON object), one per text
// field, in order, under the request's kCacheScopeField (none: shared).
// Errors: kInvalidArgument (not a JSON object; a text field or the scope
// that is not a string; Validate's).
Result<std::vector<std::string>> ConditionKeysFor(const ConditionEncoder& e,
                                                  std::string_view request_json);

// Parameters as a JSON object and back: texts are strings, ints integers,
// floats numbers with a fraction or exponent, lists arrays of one kind.
// Errors (FromJson): kInvalidArgument naming what is not one of those.
std::string ParamsToJson(std::span<const Field> params);
Result<std::vector<Field>> ParamsFromJson(std::string_view json);

// A stage input naming cache entries, in order (instead of a payload
// descriptor): "sluice-cached-input-v1\n" then one key per line.
std::string EncodeCachedInput(std::span<const std::string> keys);
bool IsCachedInput(std::string_view input);
// Errors: kInvalidArgument (not a cached input; no key; an empty key).
Result<std::vector<std::string>> DecodeCachedInput(std::string_view input);

}  // namespace sluice::cache

#endif  // SLUICE_CACHE_CONDITION_H_
