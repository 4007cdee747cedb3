// sluice/orchestrator/server.h
//
// The orchestrator service (`sluice orchestrator`): gRPC for stage workers
// (register, heartbeat with credits and step progress, a stream of
// assignments, done/failed) and HTTP/JSON for clients (OpenAI's images and
// videos APIs, jobs, server-sent events, /metrics, /healthz, /readyz) on an
// asynchronous server with limits, tenants and API keys. Scheduling is the
// deterministic core in src/orchestrator/core.
//
// Thread safety: all methods may be called from any thread.

#ifndef SLUICE_ORCHESTRATOR_SERVER_H_
#define SLUICE_ORCHESTRATOR_SERVER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sluice/adapters.h"
#include "sluice/orchestrator/autoscale.h"
#include "sluice/security.h"
#include "sluice/status.h"

namespace sluice {

namespace internal {
class OrchestratorServerImpl;
}

// The client-facing HTTP server. Requests past a limit are answered in
// OpenAI's error shape and their connection closed: headers over
// max_header_bytes 431, a body over max_body_bytes 413 (before it is read),
// JSON nested deeper than max_json_depth 400; past max_connections a new
// connection gets 503. A request not read whole within request_timeout of
// its first byte, or a connection idle for idle_timeout, is closed.
struct HttpFrontConfig {
  int threads = 2;  // I/O threads; waiting requests and event streams hold none.
  std::size_t max_header_bytes = 16 << 10;
  std::size_t max_body_bytes = 16 << 20;
  std::size_t max_json_depth = 32;
  std::size_t max_connections = 10000;
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds idle_timeout{60000};
  // A quiet server-sent event stream gets a keep-alive comment this often.
  std::chrono::milliseconds sse_keepalive{15000};
  // Browser origins allowed cross-origin ("*": any); empty: CORS off.
  std::vector<std::string> cors_origins;
  // A synchronous request whose client disconnects keeps its jobs running
  // (default: they are cancelled and their payloads freed, as DELETE does).
  bool keep_abandoned_jobs = false;
  // HTTPS: the certificate chain and private key, PEM text (both or
  // neither). Empty: plain HTTP.
  std::string tls_cert_pem, tls_key_pem;
};

// What one generation request may ask for, checked at submission (400
// naming the field) so no stage worker is the first to refuse it. One set
// for the deployment.
struct RequestLimits {
  int max_steps = 200;  // Denoise steps.
  int max_images = 4;   // An images request's n.
  int max_frames = 1024;
  // Width x height x frames (frames is 1 for images): 720p at 129 frames.
  std::uint64_t max_pixel_frames = 1280ull * 720 * 129;
};

// One tenant's limits (0: none). Submissions beyond them answer 429 with
// Retry-After.
struct TenantLimits {
  double requests_per_second = 0;      // Submissions, as a token bucket...
  double burst = 0;                    // ...holding this many (0: 2 s worth, at least 1).
  std::size_t max_jobs_in_flight = 0;  // Unfinished (queued or running) jobs.
  double queue_share = 0;              // Unfinished jobs as a share of max_queued_jobs, in (0, 1].
};

// Who may use the HTTP API. Empty `keys`: the API is open (the server says
// so when it starts). Else every route but /healthz, /health, /readyz,
// /metrics and /v1/autoscale needs "Authorization: Bearer KEY" of a known key, and a tenant
// sees and cancels only its own jobs.
struct AccessConfig {
  std::map<std::string, std::string> keys;  // API key -> tenant.
  // Keys kept only hashed: HMAC-SHA256 under `salt` of the key (64
  // lowercase hex digits) -> tenant; a reader of the file learns no key.
  std::string salt;  // Bytes; required by hashed_keys.
  std::map<std::string, std::string> hashed_keys;
  std::map<std::string, TenantLimits> tenants;

  // Whether any key is configured (else the API is open).
  bool closed() const { return !keys.empty() || !hashed_keys.empty(); }
  // Loads a YAML file:
  //   salt:     HEX (16..64 bytes)           (optional; needed by hashed keys)
  //   keys:     {KEY: TENANT, "hmac-sha256:HEX": TENANT, ...}
  //                                          (required, non-empty)
  //   tenants:  {TENANT: {requests_per_second, burst, max_jobs_in_flight,
  //              queue_share}, ...}          (optional)
  // `sluice api-key hash --salt HEX` prints a key's hashed entry.
  // Errors: kInvalidArgument naming the file and what is wrong in it.
  static Result<AccessConfig> Load(const std::string& path);
};

// A hashed API-key entry's name: "hmac-sha256:" and HMAC-SHA256(salt, key)
// in lowercase hex.
std::string HashedApiKey(std::string_view salt, std::string_view key);

struct OrchestratorConfig {
  std::string listen = "127.0.0.1:0";       // gRPC for workers; port 0 picks one.
  std::string http_listen = "127.0.0.1:0";  // HTTP for clients; port 0 picks one.
  std::size_t max_queued_jobs = 1024;       // Beyond: HTTP 429 with Retry-After.
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds worker_timeout{3000};  // Silent this long: the worker is lost.
  int max_attempts = 3;                            // Per stage.
  // A retryable stage failure runs again after this, doubling with each
  // attempt (at most 30 s): a failure caused by a dying peer (a store node
  // not yet declared lost) outlasts its detection. 0..30 s; 0: at once.
  std::chrono::milliseconds retry_backoff{1000};
  // A worker that reports no progress on an assignment this long loses it:
  // the work goes to another worker, the lapse counts as an attempt, and
  // the worker is told to stop. Progress (a step) renews it.
  std::chrono::milliseconds assignment_timeout{600000};
  // How many jobs per slot of the next pool an admission stage (denoise)
  // may hold reservations for: 0 admits a job only into a free, unreserved
  // downstream slot, so denoise runs at most as many jobs as decode has
  // slots; k > 0 lets a small decode pool serve a large denoise pool while
  // outputs waiting downstream stay bounded (k per slot). `sluice sim`
  // shows what it does at scale.
  double admission_overcommit = 0;
  // A synchronous image request waits this long before answering 504.
  std::chrono::milliseconds sync_timeout{600000};
  // Finished jobs answer (status, error, result) for the newest
  // max_finished_jobs, each for result_ttl after it finished; with a
  // journal, across restarts too (results are kept in the result dir).
  std::size_t max_finished_jobs = 10000;
  std::chrono::seconds result_ttl{3600};
  // Checkpoints of jobs submitted with keep_checkpoints stay this long
  // after each is written (resume_from); 1 s .. 30 days.
  std::chrono::seconds checkpoint_retention{3600};
  // SQLite journal of accepted jobs; after a restart with the same path,
  // unfinished jobs run again and finished ones answer as before. Empty: no
  // journal (jobs die with the process, results are held in memory).
  std::string journal_path;
  // The journal in etcd instead (exclusive with journal_path), so a standby
  // orchestrator on another host that takes over runs on every accepted
  // job and answers for finished ones. Writes are fenced by the leader's
  // key: an orchestrator that no longer leads cannot write.
  struct EtcdJournalConfig {
    std::string endpoints;  // "http[s]://host:port[,...]"; empty: not in etcd.
    // TLS to etcd (the CA; a client certificate and key when etcd requires
    // one) and etcd's auth (user and password), as for every etcd client.
    std::string ca_file, cert_file, key_file, user, password;
    std::string prefix;      // Key prefix ending in '/', e.g. "/sluice/prod/journal/".
    std::string leader_key;  // Empty: unfenced (one orchestrator only).
    std::int64_t leader_lease = 0;
    // Succeeded results up to this size (at most 1 MiB) are kept in etcd; a
    // larger one is served by the orchestrator that made it (or from a
    // result_dir on storage both share) and answers 404 result_gone after
    // a takeover.
    std::size_t max_result_bytes = std::size_t{1} << 20;
  };
  EtcdJournalConfig journal_etcd;
  // With a journal: the directory holding succeeded jobs' result bytes, one
  // file each, removed when the job expires (the orchestrator's memory holds
  // none). Empty: journal_path + ".results" (in etcd: memory and etcd).
  // Needs a journal.
  std::string result_dir;
  // The store master ("host:port"): jobs' store payloads (reported by
  // workers) are removed when a job is cancelled, and a payload the store
  // loses re-runs the stage that produced it. Empty: no store.
  std::string store_master;
  // Where the store master is now (e.g. its leader in etcd), asked when it
  // cannot be reached: see StoreClientConfig::resolve_master.
  std::function<std::string()> resolve_store_master;
  // Video content: decode workers may return a frames archive, which is
  // served as MP4 when ffmpeg is available. "auto": ffmpeg found on PATH;
  // empty: never (the archive is served); else the ffmpeg binary to run.
  std::string ffmpeg = "auto";
  // Colocated deployment (the baseline disaggregation is measured against):
  // every job is one assignment to a worker of the denoise pool, which runs
  // encode, denoise and decode in turn.
  bool colocated = false;
  // Models declared from the start, name -> pipeline as text
  // ("encode,denoise:admission,decode": stage names in order, ":admission"
  // marking admission stages): jobs for them queue before any worker
  // registers. Workers declare the models they serve as they register.
  std::map<std::string, std::string> models;
  // Requests naming no model run on this one (declared with the standard
  // pipeline encode, denoise:admission, decode unless `models` names it).
  std::string default_model = "sluice-reference";
  // Each job's final output is checked before it is served: an image job's
  // must be a PNG of the requested size, a video's a frames archive (the
  // requested frame count, frames of that size) or an MP4. A bad one fails
  // that attempt and runs again on another worker; a worker with
  // `max_bad_outputs` bad ones gets no further work. Off: whatever the last
  // stage returns is served.
  bool check_outputs = true;
  int max_bad_outputs = 3;
  // Condition-cache entries are the submitting tenant's (with API keys),
  // so a cache hit tells no tenant what another asked; shared: every
  // tenant's jobs find one another's (more hits, and that leak).
  bool shared_condition_cache = false;

  // The cluster credential and TLS (sluice/security.h) for the worker
  // service (every call must carry it, else UNAUTHENTICATED) and the calls
  // to the store master. The HTTP front answers clients by `access`.
  SecurityConfig security;

  // Pool sizes recommended from the pools' load (sluice/orchestrator/
  // autoscale.h), sampled ten times a second and decided once a second:
  // GET /v1/autoscale and the metric
  // sluice_orchestrator_recommended_workers, for an external autoscaler.
  AutoscaleOptions autoscale;

  // Per-request LoRA adapters ("lora": [{"name", "scale"}] on images and
  // videos): registered by name from `dir` at start (every
  // NAME.safetensors) or by POST /v1/adapters (written to `dir` too), each
  // checked by `check` (the served model's: the reference model's is
  // CheckReferenceAdapter) and put in the store, where workers load it.
  // Needs store_master. No check: no adapters (POST /v1/adapters answers
  // 501, a request naming one 404).
  // The files go to the store through a transfer engine of the
  // orchestrator's own, on the gRPC face's host; listening on every
  // address, it needs `advertise` (the host store nodes reach it at), and
  // without one adapters are not served (POST answers 503 saying so; a
  // `dir` then fails the start).
  struct AdapterConfig {
    std::string dir;
    std::function<Result<AdapterFacts>(std::string bytes)> check;
    std::string advertise;
  };
  AdapterConfig adapters;

  HttpFrontConfig http;
  RequestLimits limits;
  AccessConfig access;
};

class OrchestratorServer {
 public:
  // Binds both ports (never shared with another process: a port in use is
  // an error) before returning. Routes protobuf's process-wide log lines
  // through sluice's logger, at most one a second. Errors: kInvalidArgument naming the bad
  // field; kUnavailable (a port cannot be bound).
  static Result<std::unique_ptr<OrchestratorServer>> Start(const OrchestratorConfig& config);
  // Stops both faces; worker streams end, open HTTP connections (waiting
  // requests, event streams) are closed without cancelling their jobs.
  ~OrchestratorServer();

  const std::string& endpoint() const;       // gRPC "host:port".
  const std::string& http_endpoint() const;  // HTTP "host:port".

  // Every pool's load as the scheduler has it now (copied).
  std::vector<PoolLoad> PoolLoads() const;
  // The latest recommendation for every pool seen in the autoscale
  // window (updated once a second; copied).
  std::vector<PoolRecommendation> Recommendations() const;

 private:
  explicit OrchestratorServer(std::unique_ptr<internal::OrchestratorServerImpl> impl);
  std::unique_ptr<internal::OrchestratorServerImpl> impl_;
};

}  // namespace sluice

#endif  // SLUICE_ORCHESTRATOR_SERVER_H_
