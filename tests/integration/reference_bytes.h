// For multi-process tests: what the reference pipeline computes for a
// request body in one process (the bytes a cluster must serve for it).
#ifndef SLUICE_TESTS_INTEGRATION_REFERENCE_BYTES_H_
#define SLUICE_TESTS_INTEGRATION_REFERENCE_BYTES_H_

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/reference/pipeline.h"

namespace sluice::testing {

// The PNG or video bytes for `body` with the workers' defaults (12 steps,
// guidance 4), or a text saying why there are none.
inline std::string ReferenceBytes(const nlohmann::json& body) {
  auto r = reference::ParseRequest(body.dump(), 12, 4.0f);
  if (!r.ok()) {
    return "unparsable: " + r.status().ToString();
  }
  auto out = reference::GenerateAll(*r);
  return out.ok() ? out->first : "failed: " + out.status().ToString();
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_INTEGRATION_REFERENCE_BYTES_H_
