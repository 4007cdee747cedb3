// The orchestrator's HTTP/JSON face for clients:
//   POST   /v1/images/generations  OpenAI's images body (+ negative_prompt,
//                                  seed, steps, priority, deadline_ms, async)
//   POST   /v1/videos              OpenAI's video body (prompt, size, seconds;
//                                  + frames, fps, seed, steps, ...): a job
//   GET    /v1/videos/{id}[/content]  the video object, then its bytes
//   GET    /v1/jobs/{id}[/content] status, stage, step progress, error; bytes
//   GET    /v1/jobs/{id}/events    server-sent events until the job ends
//   DELETE /v1/jobs/{id}           cancel
//   GET    /metrics, /healthz (/health), /readyz
// A malformed body answers 400 naming the field; a full queue 429 with
// Retry-After. A synchronous request waits without holding a thread; if its
// client disconnects, its jobs are cancelled (unless keep_abandoned_jobs).
#ifndef SLUICE_ORCHESTRATOR_SERVICE_HTTP_API_H_
#define SLUICE_ORCHESTRATOR_SERVICE_HTTP_API_H_

#include <chrono>

#include "sluice/orchestrator/server.h"

#include "http/router.h"
#include "orchestrator/service/orchestrator_state.h"

namespace sluice::orchestrator {

struct HttpOptions {
  std::chrono::milliseconds sync_timeout{600000};
  std::string ffmpeg;  // Path of ffmpeg for frames-archive videos; empty: serve the archive.
  std::size_t max_json_depth = 32;
  // A synchronous request's client that disconnects leaves its jobs
  // running (default: they are cancelled, their payloads freed).
  bool keep_abandoned_jobs = false;
  RequestLimits limits;
  AccessConfig access;  // API keys and tenant limits; no keys: open.
};

// Adds the API's routes to `router`. `state` must outlive the server that
// serves them.
void InstallHttpApi(http::Router& router, OrchestratorState& state, const HttpOptions& options);

// Validates an "image" or "video" generation body against every rule a
// stage applies and `o.limits`; on success returns the job request (the
// body, normalized, becomes request_json: size, seed, and for videos fps
// and frames filled in) and sets `*async`. Bodies nested deeper than
// `o.max_json_depth` are refused before a tree is built. Errors:
// kInvalidArgument naming the field ("body" for the body as a whole).
Result<JobRequest> ParseGenerationRequest(std::string_view body, std::string_view kind,
                                          const HttpOptions& o, bool* async);

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_HTTP_API_H_
