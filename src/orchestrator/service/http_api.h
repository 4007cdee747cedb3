// The orchestrator's HTTP/JSON face for clients (OpenAI's images and
// videos APIs plus sluice's jobs):
//   POST   /v1/images/generations   an images body: waits, or 202 with "async"
//   POST   /v1/images/edits         multipart/form-data: a picture (image), a
//                                    prompt, strength, size...: as generations
//   POST   /v1/videos               JSON or multipart/form-data: a video job
//   GET    /v1/videos               list (after, limit, order)
//   GET    /v1/videos/{id}[/content], DELETE /v1/videos/{id}
//   GET    /v1/jobs                 list, every kind (after, limit, order)
//   GET    /v1/jobs/{id}[/content], DELETE /v1/jobs/{id}
//   GET    /v1/jobs/{id}/events     server-sent events until the job ends
//   GET    /v1/cluster[/events]     pools and counters, now or as events
//   GET    /console[/...]           the web console (no key to load it)
//   GET    /metrics, /healthz (/health), /readyz    (no key needed)
// Refusals answer OpenAI's error object: a malformed body 400 naming the
// field, a missing key 401, another tenant's job 404, a full queue or a
// tenant over its limits 429 with Retry-After. A synchronous request waits
// without holding a thread; if its client disconnects, its jobs are
// cancelled (unless keep_abandoned_jobs).
#ifndef SLUICE_ORCHESTRATOR_SERVICE_HTTP_API_H_
#define SLUICE_ORCHESTRATOR_SERVICE_HTTP_API_H_

#include <chrono>
#include <functional>
#include <memory>

#include "sluice/orchestrator/server.h"

#include "http/router.h"
#include "orchestrator/service/adapter_registry.h"
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
  // The adapters requests may name (/v1/adapters); null: none.
  std::shared_ptr<AdapterRegistry> adapters;
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
// `model_size` (optional): the default size of a model ("" for the
// default model; "" back: none declared), used when the body has no size.
using ModelSizeFn = std::function<std::string(const std::string& model)>;
// `kind`: "image", "video", "edit" (an image job that may also carry
// "strength", in (0, 1]; the picture is added by the caller) or
// "video_reference" (a video job from a reference picture, likewise).
Result<JobRequest> ParseGenerationRequest(std::string_view body, std::string_view kind,
                                          const HttpOptions& o, bool* async,
                                          const ModelSizeFn& model_size = nullptr);

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_HTTP_API_H_
