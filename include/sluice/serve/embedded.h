// sluice/serve/embedded.h
//
// The embedded deployment behind `sluice serve`: a store master, a store
// node, the orchestrator (gRPC for workers, HTTP for clients) and a pool
// of stage workers per stage, all in this process on loopback. Workers
// move payloads through the store exactly as separate processes would
// (their own transfer engines, shm between them).
//
// Disaggregated (default): `encode_workers` + `decode_workers` +
// `edge_workers` (each serving both the encode and the decode pool: the
// light stages share one worker) + the rest denoise. Denoise admission
// reserves a decode slot, so each decode registration takes up to
// 4 × denoise / decoders assignments at once (decodes are short), or
// `decode_slots`. Colocated: `workers` workers,
// each running all three stages of a job in turn (the orchestrator's pipeline is the denoise stage
// alone) — the baseline disaggregation is compared with, at equal worker count.
//
// Thread safety: all methods may be called from any thread.

#ifndef SLUICE_SERVE_EMBEDDED_H_
#define SLUICE_SERVE_EMBEDDED_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sluice/orchestrator/server.h"
#include "sluice/status.h"
#include "sluice/store/master.h"

namespace sluice {

namespace internal {
class EmbeddedClusterImpl;
}

struct EmbeddedConfig {
  std::string http_listen = "127.0.0.1:8000";  // Port 0 picks one.
  int workers = 4;                             // Total stage workers, 1..64.
  int encode_workers = 1;                      // Disaggregated only.
  int decode_workers = 1;                      // Disaggregated only.
  int edge_workers = 0;                        // Disaggregated: encode + decode each.
  // Disaggregated: every denoise worker also serves the encode and decode
  // pools (the light stages share the heavy workers instead of taking
  // workers of their own; stages are still scheduled separately).
  bool light_on_denoise = false;
  bool colocated = false;
  // Disaggregated: decodes each decode registration runs at once. 0: 4 ×
  // denoise / decoders (profile and reference decodes are short and the
  // decode slot is reserved for a denoise's whole run). >= 1: that many, as
  // a GPU running one VAE decode at a time; denoise admission then
  // overcommits the decode slots (each may be reserved by
  // ceil(denoise / decode slots) jobs) so decode no longer caps denoise.
  int decode_slots = 0;
  std::uint64_t store_memory = std::uint64_t{1} << 30;
  // "reference" (real models, CPU) or a profile name (profile_stages.h:
  // published timings × time_factor, real payload sizes).
  std::string stages = "reference";
  double time_factor = 0.01;  // Profile stages only, in (0, 1].
  // Profile stages: a video's latent handed from denoise to decode in this
  // many chunks along its frames, decoded as they land (1..64;
  // profile_stages.h).
  int latent_chunks = 1;
  int default_steps = 12;    // Reference stages: steps when a request names none.
  int checkpoint_every = 4;  // Reference denoise: checkpoint every k steps (0: never).
  // Reference denoise: the step cache's threshold for a request that names
  // none (ReferenceStageOptions::step_cache_threshold), 0..1; 0: off.
  float step_cache_threshold = 0;
  // Reference denoise: step-level batching of up to this many jobs per
  // worker (ReferenceStageOptions::denoise_batch; the workers take as many
  // at once), 1..64; 1: each job alone.
  int denoise_batch = 1;
  // Reference denoise with batching: interactive jobs step alone, outside
  // the batch (ReferenceStageOptions::interactive_alone).
  bool interactive_alone = false;
  // Reference stages: the directory of LoRA adapters served by name
  // (OrchestratorConfig::AdapterConfig; POST /v1/adapters writes there
  // too). Empty: adapters registered by POST live as long as the process.
  std::string adapters_dir;
  // Reference encode: each text's embedding cached in the store; a job
  // whose prompt and negative prompt are cached skips encode.
  bool condition_cache = true;
  // Profile encode too (profile_stages.h, ProfileCaches): stand-in
  // embeddings of the profile's size cached per text, and jobs whose texts
  // are all cached skip encode. The encode workers then serve the named
  // profile's model only (their declared encoder is that profile's).
  bool profile_condition_cache = false;
  // Reference denoise: CFG branch sharing (the negative prompt's
  // cross-attention keys and values in the feature cache); same bytes.
  bool cfg_sharing = false;
  std::size_t max_queued_jobs = 256;
  std::chrono::milliseconds worker_timeout{3000};
  std::string journal_path;  // Empty: no journal.
  // Elastic pools (`sluice serve --elastic`): the pools' load is sampled
  // ten times a second, and every second each stage's pool is resized to what `autoscale`
  // recommends for it (sluice/orchestrator/autoscale.h: bounds,
  // thresholds, cooldowns): a worker is added at once, and removed only
  // after it drained (finished or handed back its work; no job is lost).
  // Needs a worker per stage of its own (no edge workers, no light stages
  // on denoise workers), or colocated. `autoscale` also sets what the
  // orchestrator recommends (GET /v1/autoscale).
  bool elastic = false;
  AutoscaleOptions autoscale;
  HttpFrontConfig http;  // The HTTP front's limits and options.
  RequestLimits limits;  // What one request may ask for.
  AccessConfig access;   // API keys; none: the API is open.
};

class EmbeddedCluster {
 public:
  // Starts every role and waits until each stage has a registered worker.
  // Errors: kInvalidArgument naming the bad field; kUnavailable (the HTTP
  // port is taken); errors of the roles.
  static Result<std::unique_ptr<EmbeddedCluster>> Start(const EmbeddedConfig& config);
  // Drain(), then stops every role.
  ~EmbeddedCluster();

  const std::string& http_endpoint() const;  // "host:port".
  const std::string& orchestrator_endpoint() const;
  const std::string& master_endpoint() const;
  // Bytes the store holds now (committed and being written).
  std::uint64_t store_bytes_used() const;
  // What jobs hold in the store now: committed objects other than cache
  // entries (the condition cache's stay by design), open puts and
  // reservations. Zero once every job is done and cleaned up.
  std::uint64_t store_job_objects() const;
  // The store master's gauges and counters now (cache classes included).
  MasterMetrics store_metrics() const;
  // Stage workers serving `stage`'s pool now, not draining ("denoise"
  // counts colocated workers).
  int pool_workers(const std::string& stage) const;
  // The orchestrator's latest pool-size recommendations (per model, stage).
  std::vector<PoolRecommendation> recommendations() const;
  // With elastic pools: the resize decisions made and applied so far (one
  // a second); 0 without.
  std::uint64_t elastic_decisions() const;
  // The elastic loop stops (pools stay as they are); workers stop taking
  // work and finish (or hand back) what they run. Idempotent.
  void Drain(std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  explicit EmbeddedCluster(std::unique_ptr<internal::EmbeddedClusterImpl> impl);
  std::unique_ptr<internal::EmbeddedClusterImpl> impl_;
};

}  // namespace sluice

#endif  // SLUICE_SERVE_EMBEDDED_H_
