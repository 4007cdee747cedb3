// `sluice serve` (the embedded deployment, optionally running a demo) and
// `sluice generate` (the HTTP client).
#ifndef SLUICE_TOOLS_SERVE_H_
#define SLUICE_TOOLS_SERVE_H_

#include <functional>
#include <string>
#include <vector>

#include "sluice/client/http_client.h"
#include "sluice/security.h"
#include "sluice/serve/embedded.h"

namespace sluice::cli {

struct ServeOptions {
  EmbeddedConfig cluster;
  bool demo = false;  // Submit demo jobs, write results, print figures, exit.
  std::string out_dir = "out";
  bool exit_on_eof = false;
};
// Returns the process exit code (demo: 0 when every job succeeded).
int RunServe(const ServeOptions& o);

struct GenerateOptions {
  std::string server = "127.0.0.1:8000";
  client::GenerateRequest request;
  std::string output;  // File to write.
  int timeout_s = 600;
};
int RunGenerate(const GenerateOptions& o);

struct WorkerOptions {
  std::string stage, orchestrator, master, mode = "store", listen = "127.0.0.1:0";
  std::string advertise;  // The engine's, for peers (empty: listen).
  // The engine's transports (checked names); empty: the connector's default.
  std::vector<std::string> transports;
  // Where the orchestrator is now (etcd's leader), asked when it is away.
  std::function<std::string()> resolve_orchestrator;
  std::function<std::string()> resolve_master;  // Where the store master is now.
  std::string profile;                          // Empty: the reference models.
  std::vector<std::string> models;              // Empty: the reference model, or the profile's.
  bool colocated = false;
  int capacity = 1;
  int steps = 12;
  int checkpoint_every = 4;
  float step_cache_threshold = 0;  // Reference denoise: for requests naming none; 0: off.
  // Reference denoise: resident LoRA adapters beyond this many bytes drop
  // the least recently used (ReferenceStageOptions::adapter_cache_bytes).
  std::string adapter_cache = "256MiB";
  // Reference denoise: step-level batching of up to this many of its
  // concurrent jobs (ReferenceStageOptions::denoise_batch); 1: off.
  int denoise_batch = 1;
  // With batching: interactive jobs step alone
  // (ReferenceStageOptions::interactive_alone).
  bool interactive_alone = false;
  // Encode with --master: cache each text's embedding in the store
  // (condition cache) and let jobs whose conditions are all cached skip
  // encode. Reference stages: on unless turned off. Profile stages: only
  // when asked for (`condition_cache_given`), with stand-in embeddings of
  // the profile's size.
  bool condition_cache = true;
  bool condition_cache_given = false;  // --condition-cache was on the command line.
  // Reference denoise with --master: CFG branch sharing (feature cache).
  bool cfg_sharing = false;
  double time_factor = 1.0;
  SecurityConfig security;  // For the orchestrator, the store and the engine.
  // Its assignments' lease; 0: from the profile, else the orchestrator's.
  std::int64_t assignment_timeout_ms = 0;
  // Serves /metrics on this port of --listen's host (0 picks one; -1: none).
  int metrics_port = -1;
};
// A stage worker (`sluice worker`); SIGTERM/SIGINT drain it: running work
// finishes or is handed back.
int RunWorker(const WorkerOptions& o, bool exit_on_eof);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SERVE_H_
