// `sluice serve` (every role in one process, optionally a demo) and `sluice
// generate` (one job through a running server).
#include <iostream>
#include <memory>

#include "sluice/runtime/reference_stages.h"
#include "sluice/security.h"
#include "sluice/units.h"

#include "sluice_cli/autoscale_flags.h"
#include "sluice_cli/commands.h"
#include "sluice_cli/http_flags.h"
#include "sluice_cli/serve.h"

namespace sluice::cli {

using client::GenerateRequest;
namespace {

void AddServe(CLI::App& app, std::vector<Command>* out) {
  struct Opts {
    ServeOptions serve;
    std::string memory = "1GiB";
    std::string weights;
    bool insecure = false;
  };
  auto o = std::make_shared<Opts>();
  EmbeddedConfig& c = o->serve.cluster;
  CLI::App* cmd = app.add_subcommand(
      "serve", "every role in one process: store, orchestrator, stage pools (HTTP API)");
  cmd->add_option("--http", c.http_listen, "HTTP host:port (port 0 picks one)")
      ->capture_default_str();
  cmd->add_option("--workers", c.workers, "stage workers in all")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--encode-workers", c.encode_workers)
      ->check(CLI::Range(0, 62))
      ->capture_default_str();
  cmd->add_option("--decode-workers", c.decode_workers)
      ->check(CLI::Range(0, 62))
      ->capture_default_str();
  cmd->add_option("--edge-workers", c.edge_workers,
                  "workers serving both the encode and the decode pool")
      ->check(CLI::Range(0, 62))
      ->capture_default_str();
  cmd->add_flag("--colocated", c.colocated,
                "each worker runs all three stages of a job (the baseline)");
  cmd->add_option("--memory", o->memory, "store memory")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  cmd->add_option("--stages", c.stages,
                  "reference (real models on the CPU) or a profile (wan2.1-480p, flux-1024, ...)")
      ->capture_default_str();
  cmd->add_option("--weights", o->weights,
                  "reference stages: a safetensors file, or random:SEED (default: the shipped "
                  "trained weights)");
  cmd->add_option("--time-factor", c.time_factor, "profile stages: time scale")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  cmd->add_option("--steps", c.default_steps, "denoise steps when a request names none")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_flag("--condition-cache,!--no-condition-cache", c.condition_cache,
                "reference encode: cache each text's embedding in the store; a job whose prompt "
                "and negative prompt are cached skips encode (default: on)");
  cmd->add_flag("--cfg-sharing", c.cfg_sharing,
                "reference denoise: share the negative prompt's cross-attention keys and values "
                "between requests through the store's feature cache (same bytes)");
  cmd->add_option("--checkpoint-every", c.checkpoint_every,
                  "store the denoise state every k steps (0: never)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--step-cache-threshold", c.step_cache_threshold,
                  "reference denoise: skip the denoiser's blocks on a step whose input moved less "
                  "than this since the last full step, for requests that name no step_cache "
                  "(0: off; docs/benchmarks/step-cache.md)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--denoise-batch", c.denoise_batch,
                  "reference denoise: run the steps of up to this many concurrent jobs per worker "
                  "as one batch (each worker then takes as many jobs; 1: each job alone)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_flag("--interactive-alone", c.interactive_alone,
                "reference denoise with --denoise-batch: interactive jobs step alone, outside the "
                "batch (where a batch costs each member more than a step alone, as on a CPU)");
  cmd->add_option("--adapters", c.adapters_dir,
                  "reference stages: directory of LoRA adapters served by name "
                  "(NAME.safetensors; POST /v1/adapters writes there too; the shipped ones: "
                  "models/adapters)");
  cmd->add_option("--max-queued-jobs", c.max_queued_jobs)
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--journal", c.journal_path, "SQLite journal of accepted jobs");
  cmd->add_flag("--demo", o->serve.demo,
                "submit demo images and a video, write them to --out, print figures, exit");
  cmd->add_option("--out", o->serve.out_dir, "demo output directory")->capture_default_str();
  cmd->add_flag("--exit-on-stdin-eof", o->serve.exit_on_eof,
                "stop when stdin closes (for supervisors)");
  cmd->add_flag("--elastic", c.elastic,
                "resize each stage's pool to its load (the --autoscale-* flags; a worker goes "
                "only after it drained)");
  cmd->add_flag("--insecure", o->insecure,
                "allow an open HTTP API (no --api-keys) on a non-loopback --http address");
  auto http = AddHttpFrontFlags(cmd, &c.http);
  AddRequestLimitFlags(cmd, &c.limits);
  auto keys = AddApiKeysFlag(cmd, &c.access);
  auto https = AddHttpTlsFlags(cmd, &c.http);
  auto autoscale = AddAutoscaleFlags(cmd, &c.autoscale);
  out->push_back({cmd, [o, cmd, http, keys, https, autoscale] {
                    http();
                    autoscale();
                    if (Status s = keys(); !s.ok()) {
                      std::cerr << "sluice serve: --" << s.message() << "\n";
                      return 2;
                    }
                    if (Status s = https(); !s.ok()) {
                      std::cerr << "sluice serve: --" << s.message() << "\n";
                      return 2;
                    }
                    if (Status h =
                            CheckHttpListenSecurity("sluice serve", o->serve.cluster.http_listen,
                                                    o->serve.cluster.access.closed(), o->insecure);
                        !h.ok()) {
                      std::cerr << h.message() << "\n";
                      return 2;
                    }
                    o->serve.cluster.store_memory = *ParseByteSize(o->memory);
                    if (o->serve.cluster.stages == "reference" || !o->weights.empty()) {
                      if (Status s = LoadReferenceWeights(o->weights); !s.ok()) {
                        std::cerr << "sluice serve: --weights: " << s.message() << "\n";
                        return 2;
                      }
                    }
                    if (o->serve.demo && cmd->count("--http") == 0) {
                      // Never collide with a running server.
                      o->serve.cluster.http_listen = "127.0.0.1:0";
                    }
                    return RunServe(o->serve);
                  }});
}

void AddGenerate(CLI::App& app, std::vector<Command>* out) {
  struct Opts {
    GenerateOptions gen;
    int steps = 0;
    bool preview = false;
  };
  auto o = std::make_shared<Opts>();
  GenerateRequest& r = o->gen.request;
  CLI::App* cmd =
      app.add_subcommand("generate", "submit one image or video to a server and save it");
  cmd->add_option("--server", o->gen.server,
                  "orchestrator HTTP endpoint: host:port, http://host:port or https://host:port")
      ->capture_default_str();
  cmd->add_option("--ca-file", r.ca_file,
                  "with an https:// server: PEM CA its certificate must chain to (default: the "
                  "system's roots)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--prompt", r.prompt)->required();
  cmd->add_flag("--video", r.video, "generate a video (default: an image)");
  cmd->add_option("--frames", r.frames, "video frames")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--size", r.size, "WIDTHxHEIGHT (default: the server's)");
  cmd->add_option("--steps", o->steps, "denoise steps (default: the server's)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--seed", r.seed)->capture_default_str();
  cmd->add_flag("--preview", o->preview,
                "write a preview of each denoise step to OUTPUT.preview.png as it comes");
  cmd->add_option("--priority", r.priority)
      ->check(CLI::IsMember({"interactive", "standard", "batch"}))
      ->capture_default_str();
  cmd->add_option("--model", r.model, "the model to run (default: the server's)");
  auto api_key = AddApiKeyFlags(cmd, &r.api_key);
  auto lora = AddLoraFlag(cmd, &r.lora);
  cmd->add_option("-o,--output", o->gen.output, "file to write")->required();
  cmd->add_option("--timeout", o->gen.timeout_s, "seconds to wait; then the job is cancelled")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  out->push_back({cmd, [o, api_key, lora] {
                    for (Status s : {api_key(), lora()}) {
                      if (!s.ok()) {
                        std::cerr << "sluice generate: --" << s.message() << "\n";
                        return 2;
                      }
                    }
                    if (o->steps > 0) {
                      o->gen.request.steps = o->steps;
                    }
                    if (o->preview) {
                      o->gen.request.preview_every = 1;
                    }
                    return RunGenerate(o->gen);
                  }});
}

}  // namespace

void AddServeCommands(CLI::App& app, std::vector<Command>* out) {
  AddServe(app, out);
  AddGenerate(app, out);
}

}  // namespace sluice::cli
