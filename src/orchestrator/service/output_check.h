// What a job's final stage must return before the orchestrator serves it:
// an image job a PNG of the requested size; a video job a frames archive of
// the requested frame count whose frames are PNGs of that size, or an MP4.
// A worker that returns anything else (a bug, or a forgery) has its stage
// retried elsewhere; see OrchestratorState::Done.
#ifndef SLUICE_ORCHESTRATOR_SERVICE_OUTPUT_CHECK_H_
#define SLUICE_ORCHESTRATOR_SERVICE_OUTPUT_CHECK_H_

#include <string_view>

#include "sluice/status.h"

namespace sluice::orchestrator {

// `kind` is the job's ("image" | "video"); `request_json` its request as
// handed to stages (its "size" "WxH" and, for videos, "frames" are what is
// checked; absent ones are not). The image, and a video's first and last
// frames, are decoded in full; the other frames' PNG headers are read.
// Errors: kInvalidArgument saying what is wrong (type, size, frame count,
// an unparsable PNG or archive).
Status CheckOutput(std::string_view kind, std::string_view request_json, std::string_view type,
                   std::string_view bytes);

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_OUTPUT_CHECK_H_
