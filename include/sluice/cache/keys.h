// sluice/cache/keys.h
//
// Standard cache keys: SHA-256 over a canonical encoding of everything that
// determines a cached value, so any worker (C++ or Python, any host) that
// would compute the same value finds it under the same key. The encoding is
// specified in docs/design/cache-keys.md; python/sluice/cache.py implements the
// same one and a test compares both on the same inputs.
//
// A key is "cache/<kind>/<64 lowercase hex digits>". Fields are named and
// typed; their order of addition does not matter (the encoding sorts them
// by name), a field's type does (the int 1 and the text "1" differ).

#ifndef SLUICE_CACHE_KEYS_H_
#define SLUICE_CACHE_KEYS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sluice/status.h"

namespace sluice::cache {

// A field's value. Floats are IEEE-754 binary64 (-0.0 encodes as 0.0; NaN
// and infinities are refused).
using FieldValue = std::variant<std::string, std::int64_t, double, std::vector<std::int64_t>,
                                std::vector<std::string>>;

struct Field {
  std::string name;  // 1..128 bytes of [a-z0-9_.]; unique within a key.
  FieldValue value;
};

// The key of kind `kind` (1..32 bytes of [a-z0-9_]) over `fields`.
// Errors: kInvalidArgument naming the kind or field that is malformed,
// duplicated, or (floats) not finite.
Result<std::string> MakeKey(std::string_view kind, std::span<const Field> fields);

// Condition embeddings (kind "cond"): one text encoded by one encoder.
// `params` are the encoder's settings that change its output (max length,
// dtype, ...); their names may not be "encoder", "encoder_version", "text"
// or "scope". A new encoder version gives new keys, so old entries are
// never served for it. `scope` is who may find the entry: a tenant's name
// gives keys only that tenant's jobs compute (the field "scope"), so a
// cache hit tells no tenant what another asked; empty: one entry shared by
// every job.
Result<std::string> ConditionKey(std::string_view encoder, std::string_view encoder_version,
                                 std::string_view text, std::span<const Field> params = {},
                                 std::string_view scope = {});

// Step checkpoints (kind "ckpt"): the sampler state after `step` of
// `total_steps` for one request. `condition_keys` are the ConditionKeys of
// the texts the sampler ran under, in the model's order (prompt first).
struct CheckpointKeyParts {
  std::string model;
  std::string model_version;
  std::string sampler;
  std::int64_t seed = 0;
  double guidance = 0;
  std::vector<std::string> condition_keys;
  std::int64_t total_steps = 0;
  std::int64_t step = 0;
  std::vector<std::int64_t> shape;
  std::string dtype;
};
// Errors: kInvalidArgument (as MakeKey; step outside 1..total_steps-1).
Result<std::string> CheckpointKey(const CheckpointKeyParts& parts);

// Framework features (kind "feat"): `parts` chosen by the framework under
// its `ns` (1..64 bytes of [a-z0-9_.]), e.g. a model's negative-condition
// cross-attention keys. Part names may not be "namespace".
Result<std::string> FeatureKey(std::string_view ns, std::span<const Field> parts);

}  // namespace sluice::cache

#endif  // SLUICE_CACHE_KEYS_H_
