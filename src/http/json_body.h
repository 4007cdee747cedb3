// JSON request bodies with a nesting limit: the depth is checked by an
// iterative (SAX) pass before any tree is built, so no parser, validator or
// serializer later recurses as deep as the input says.
#ifndef SLUICE_HTTP_JSON_BODY_H_
#define SLUICE_HTTP_JSON_BODY_H_

#include <nlohmann/json.hpp>
#include <string_view>

#include "sluice/status.h"

namespace sluice::http {

// Parses `body` as JSON nested at most `max_depth` arrays/objects deep.
// Errors: kInvalidArgument, "body: ..." naming what is wrong (not JSON and
// where, or nested too deep).
Result<nlohmann::json> ParseJsonBody(std::string_view body, std::size_t max_depth);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_JSON_BODY_H_
