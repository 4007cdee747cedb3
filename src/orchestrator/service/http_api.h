// The orchestrator's HTTP/JSON face for clients:
//   POST   /v1/images/generations  OpenAI's images body (+ negative_prompt,
//                                  seed, steps, priority, deadline_ms, async)
//   POST   /v1/videos              OpenAI's video body (prompt, size, seconds;
//                                  + frames, fps, seed, steps, ...): a job
//   GET    /v1/videos/{id}[/content]  the video object, then its bytes
//   GET    /v1/jobs/{id}           status, stage, step progress, error
//   GET    /v1/jobs/{id}/events    server-sent events until the job ends
//   DELETE /v1/jobs/{id}           cancel
//   GET    /metrics, /healthz
// A malformed body answers 400 naming the field; a full queue 429 with
// Retry-After.
#ifndef SLUICE_ORCHESTRATOR_SERVICE_HTTP_API_H_
#define SLUICE_ORCHESTRATOR_SERVICE_HTTP_API_H_

#include <httplib.h>

#include <chrono>

#include "orchestrator/service/orchestrator_state.h"

namespace sluice::orchestrator {

struct HttpOptions {
  std::chrono::milliseconds sync_timeout{600000};
  std::string ffmpeg;  // Path of ffmpeg for frames-archive videos; empty: serve the archive.
};

void InstallHttpApi(httplib::Server& http, OrchestratorState& state, HttpOptions options);

// Validates an images request body; on success returns the job request
// (the body, normalized, becomes request_json). Errors: kInvalidArgument
// naming the field.
Result<JobRequest> ParseImageRequest(std::string_view body, bool* async);
// The same for "image" or "video" bodies (videos: seconds, frames, fps).
Result<JobRequest> ParseGenerationRequest(std::string_view body, std::string_view kind,
                                          bool* async);

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_HTTP_API_H_
