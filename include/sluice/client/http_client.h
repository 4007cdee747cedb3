// sluice/client/http_client.h
//
// A client of sluice's HTTP API (the orchestrator's front): submit an image
// or video job, wait for it with its progress, fetch the result, a preview,
// or cancel it. What `sluice generate`, `sluice serve --demo`, `sluice
// eval` and the end-to-end benchmarks use. Each call opens its own
// connection; every function is safe to call from any thread.
#ifndef SLUICE_CLIENT_HTTP_CLIENT_H_
#define SLUICE_CLIENT_HTTP_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/status.h"

namespace sluice::client {

struct GenerateRequest {
  std::string prompt;
  bool video = false;
  int frames = 17;   // Video only.
  std::string size;  // Empty: the server's default.
  std::optional<int> steps;
  std::optional<double> guidance;    // Empty: the server's default.
  std::optional<int> preview_every;  // Previews every k denoise steps.
  // LoRA adapters by name, with their scales ("lora"; empty: none).
  std::vector<std::pair<std::string, double>> lora;
  std::int64_t seed = 0;
  std::string priority = "standard";
  std::string model;  // Empty: the server's default.
  // An image edit: the PNG to start from (POST /v1/images/edits, a
  // multipart form) and how much of it is redrawn ((0, 1]; empty: the
  // server's default). Images only.
  std::string picture;
  std::optional<double> strength;
  std::string api_key;  // Sent as "Authorization: Bearer KEY" when set.
  // With an https:// server: PEM CA file its certificate must chain to
  // (empty: the system's roots). The certificate must name the host dialed.
  std::string ca_file;
};

struct JobOutcome {
  std::string id;
  std::string status;  // succeeded | failed | cancelled.
  std::string error;
  double latency_s = 0;  // Submission to finish, seen by this client.
  double ttff_s = -1;    // Submission to the first decoded frame (server's figure).
  std::string content;   // Result bytes (PNG, MP4, or a frames archive).
  std::string content_type;
};

// "http://host:port", "https://host:port", "host:port" (http) → a base URL
// httplib accepts. Errors: kInvalidArgument naming the server.
Result<std::string> BaseUrl(const std::string& server);

// Submits asynchronously (an image with a picture: as an edit) and returns
// the job id. Errors: kInvalidArgument (the server's 400, with its
// message; a video with a picture), kResourceExhausted (429), kUnavailable
// (no answer).
Result<std::string> Submit(const std::string& base_url, const GenerateRequest& r);

// Where a waiting job is, as the client last saw it.
struct JobProgress {
  std::string status;  // queued | running | ...
  std::string stage;
  int step = 0, steps = 0;
  double elapsed_s = 0;  // Since submission.
  double ttff_s = -1;    // Once known.
};

struct WaitOptions {
  std::string api_key;  // As GenerateRequest::api_key.
  // Called (on the waiting thread) whenever the job's status, stage or
  // step changes.
  std::function<void(const JobProgress&)> on_progress;
  // Polled while waiting; when it turns true the job is cancelled and the
  // wait ends with kCancelled. Must outlive the call.
  const std::atomic<bool>* stop = nullptr;
  std::string ca_file;  // As GenerateRequest::ca_file.
};

// Polls the job until it finishes, then fetches the content of a succeeded
// job: with `mp4`, a video's MP4 (else the final stage's bytes as they are:
// a PNG or a frames archive). `submitted` is when Submit was called (for
// latency). At `timeout` the job is cancelled (kDeadlineExceeded); so it is
// when `stop` turns true (kCancelled). Errors: also the server's answers.
Result<JobOutcome> WaitAndFetch(const std::string& base_url, const std::string& id, bool mp4,
                                std::chrono::steady_clock::time_point submitted,
                                std::chrono::milliseconds timeout, const WaitOptions& wait = {});

// Job `id`'s newest preview (GET /v1/jobs/{id}/preview): the PNG and the
// step it shows. Errors: kNotFound (no preview yet, or no such job),
// kUnavailable (no answer).
struct Preview {
  std::string png;
  int step = 0;
};
Result<Preview> FetchPreview(const std::string& base_url, const std::string& id,
                             const std::string& api_key, const std::string& ca_file = {});

// Cancels job `id` (DELETE). Errors: kNotFound (unknown or finished),
// kUnavailable (no answer).
Status Cancel(const std::string& base_url, const std::string& id, const std::string& api_key,
              const std::string& ca_file = {});

}  // namespace sluice::client

#endif  // SLUICE_CLIENT_HTTP_CLIENT_H_
