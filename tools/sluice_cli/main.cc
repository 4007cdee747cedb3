// The `sluice` command: one binary, one subcommand per role or tool.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <thread>

#include "sluice/logging.h"
#include "sluice/orchestrator/server.h"
#include "sluice/runtime/profile_stages.h"
#include "sluice/runtime/stage_worker.h"
#include "sluice/store/master.h"
#include "sluice/store/store_node.h"
#include "sluice/units.h"

#include "bench/connector_bench.h"
#include "bench/e2e_bench.h"
#include "bench/orchestrator_bench.h"
#include "bench/store_bench.h"
#include "bench/transfer_bench.h"
#include "tools/sluice_cli/config.h"
#include "tools/sluice_cli/serve.h"
#include "tools/sluice_cli/signals.h"

namespace {

std::string SelfExe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("sluice");
}

// CLI11 validator for byte sizes ("16MiB").
struct ByteSizeValidator : CLI::Validator {
  ByteSizeValidator() {
    name_ = "SIZE";
    func_ = [](std::string& s) -> std::string {
      auto r = sluice::ParseByteSize(s);
      return r.ok() ? std::string() : std::string(r.status().message());
    };
  }
};

int RunMaster(const sluice::MasterConfig& config, bool exit_on_eof) {
  sluice::cli::BlockStopSignals();
  auto master = sluice::MasterServer::Start(config);
  if (!master.ok()) {
    std::cerr << "sluice master: " << master.status().ToString() << "\n";
    return 1;
  }
  std::cout << "READY master " << (*master)->endpoint() << " "
            << ((*master)->metrics_endpoint().empty() ? "-" : (*master)->metrics_endpoint())
            << std::endl;
  sluice::cli::WaitForStopSignal(exit_on_eof);
  return 0;
}

int RunStoreNode(const std::string& listen, const sluice::StoreNodeConfig& config,
                 bool exit_on_eof) {
  sluice::cli::BlockStopSignals();
  sluice::EngineConfig ec;
  ec.listen = listen;
  auto engine = sluice::TransferEngine::Create(ec);
  if (!engine.ok()) {
    std::cerr << "sluice store-node: " << engine.status().ToString() << "\n";
    return 1;
  }
  auto node = sluice::StoreNode::Start(engine->get(), config);
  if (!node.ok()) {
    std::cerr << "sluice store-node: " << node.status().ToString() << "\n";
    return 1;
  }
  std::cout << "READY store-node " << (*node)->node_id() << " " << (*engine)->endpoint()
            << std::endl;
  sluice::cli::WaitForStopSignal(exit_on_eof);
  return 0;
}

int RunOrchestrator(const sluice::OrchestratorConfig& config, bool exit_on_eof) {
  sluice::cli::BlockStopSignals();
  auto orch = sluice::OrchestratorServer::Start(config);
  if (!orch.ok()) {
    std::cerr << "sluice orchestrator: " << orch.status().ToString() << "\n";
    return 1;
  }
  std::cout << "READY orchestrator " << (*orch)->endpoint() << " " << (*orch)->http_endpoint()
            << std::endl;
  sluice::cli::WaitForStopSignal(exit_on_eof);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // `ROLE --config FILE`: the file's section for the role becomes flags.
  auto expanded = sluice::cli::ExpandConfig(
      std::vector<std::string>(argv + 1, argv + argc),
      {"serve", "master", "store-node", "orchestrator", "worker", "generate"});
  if (!expanded.ok()) {
    std::cerr << "sluice: " << expanded.status().message() << "\n";
    return 2;
  }
  std::vector<char*> expanded_argv = {argv[0]};
  for (std::string& a : *expanded) {
    expanded_argv.push_back(a.data());
  }
  argc = static_cast<int>(expanded_argv.size());
  argv = expanded_argv.data();

  CLI::App app{"sluice: disaggregated diffusion serving (encode / denoise / decode)"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();

  app.add_subcommand("version", "print the version")->callback([] {
    std::cout << "sluice 0.1.0\n";
  });

  CLI::App* bench = app.add_subcommand("bench", "benchmarks that print figures");
  bench->require_subcommand(1);

  sluice::MasterConfig master_config;
  CLI::App* master = app.add_subcommand("master", "run the store master (metadata, gRPC)");
  master->add_option("--listen", master_config.listen, "gRPC endpoint host:port (port 0 picks one)")
      ->capture_default_str();
  master
      ->add_option("--metrics-port", master_config.metrics_port,
                   "serve Prometheus /metrics on this port of the --listen host (0 picks one)")
      ->check(CLI::Range(0, 65535));

  std::int64_t reservation_ttl_ms = master_config.reservation_ttl.count();
  master
      ->add_option("--reservation-ttl-ms", reservation_ttl_ms,
                   "how long space reserved for a client's next put stays held unused (0: off)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{600000}))
      ->capture_default_str();

  bool exit_on_eof = false;
  master->add_flag("--exit-on-stdin-eof", exit_on_eof, "stop when stdin closes (for supervisors)");

  sluice::OrchestratorConfig orch_config;
  std::int64_t worker_timeout_ms = orch_config.worker_timeout.count();
  CLI::App* orch = app.add_subcommand(
      "orchestrator", "run the orchestrator (gRPC for workers, HTTP/JSON for clients)");
  orch->add_option("--listen", orch_config.listen, "gRPC endpoint for workers (port 0 picks one)")
      ->capture_default_str();
  orch->add_option("--http", orch_config.http_listen, "HTTP endpoint for clients")
      ->capture_default_str();
  orch->add_option("--max-queued-jobs", orch_config.max_queued_jobs,
                   "queued jobs beyond which submissions answer 429")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24))
      ->capture_default_str();
  orch->add_option("--worker-timeout-ms", worker_timeout_ms,
                   "a worker silent this long is lost and its work re-queued")
      ->check(CLI::Range(std::int64_t{600}, std::int64_t{3600000}))
      ->capture_default_str();
  orch->add_option("--store-master", orch_config.store_master,
                   "store master host:port (release cancelled payloads, re-run lost ones)");
  orch->add_option("--journal", orch_config.journal_path,
                   "SQLite file journaling accepted jobs (they survive a restart)");
  orch->add_flag("--colocated", orch_config.colocated,
                 "each job is one assignment to a denoise-pool worker running every stage");
  orch->add_flag("--exit-on-stdin-eof", exit_on_eof, "stop when stdin closes (for supervisors)");

  sluice::cli::WorkerOptions worker_opts;
  CLI::App* worker = app.add_subcommand(
      "worker", "run a stage worker (reference models, or profile stages with real payload sizes)");
  worker->add_option("--stage", worker_opts.stage, "encode, denoise or decode")
      ->required()
      ->check(CLI::IsMember({"encode", "denoise", "decode"}));
  worker->add_option("--orchestrator", worker_opts.orchestrator, "orchestrator gRPC host:port")
      ->required();
  worker->add_option("--master", worker_opts.master, "store master host:port");
  worker->add_option("--profile", worker_opts.profile,
                     "model profile, e.g. wan2.1-480p (default: the reference models)");
  worker->add_flag(
      "--colocated", worker_opts.colocated,
      "run all three stages of a job (with `orchestrator --colocated`; --stage denoise)");
  worker
      ->add_option("--steps", worker_opts.steps,
                   "reference: denoise steps when a request names none")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  worker
      ->add_option("--checkpoint-every", worker_opts.checkpoint_every,
                   "reference denoise: store the state every k steps (0: never; needs --master)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  worker->add_option("--time-factor", worker_opts.time_factor, "scales every profile timing")
      ->capture_default_str();
  worker->add_option("--capacity", worker_opts.capacity, "concurrent assignments")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  worker->add_option("--mode", worker_opts.mode, "transfer mode: store, p2p or auto")
      ->capture_default_str();
  worker->add_option("--listen", worker_opts.listen, "transfer engine endpoint")
      ->capture_default_str();
  worker->add_flag("--exit-on-stdin-eof", exit_on_eof, "stop when stdin closes (for supervisors)");

  sluice::cli::ServeOptions serve_opts;
  std::string serve_memory = "1GiB";
  CLI::App* serve = app.add_subcommand(
      "serve", "every role in one process: store, orchestrator, stage pools (HTTP API)");
  serve->add_option("--http", serve_opts.cluster.http_listen, "HTTP host:port (port 0 picks one)")
      ->capture_default_str();
  serve->add_option("--workers", serve_opts.cluster.workers, "stage workers in all")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  serve->add_option("--encode-workers", serve_opts.cluster.encode_workers)
      ->check(CLI::Range(0, 62))
      ->capture_default_str();
  serve->add_option("--decode-workers", serve_opts.cluster.decode_workers)
      ->check(CLI::Range(0, 62))
      ->capture_default_str();
  serve
      ->add_option("--edge-workers", serve_opts.cluster.edge_workers,
                   "workers serving both the encode and the decode pool")
      ->check(CLI::Range(0, 62))
      ->capture_default_str();
  serve->add_flag("--colocated", serve_opts.cluster.colocated,
                  "each worker runs all three stages of a job (the baseline)");
  serve->add_option("--memory", serve_memory, "store memory")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  serve
      ->add_option("--stages", serve_opts.cluster.stages,
                   "reference (real models on the CPU) or a profile (wan2.1-480p, flux-1024, ...)")
      ->capture_default_str();
  serve->add_option("--time-factor", serve_opts.cluster.time_factor, "profile stages: time scale")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  serve
      ->add_option("--steps", serve_opts.cluster.default_steps,
                   "denoise steps when a request names none")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  serve
      ->add_option("--checkpoint-every", serve_opts.cluster.checkpoint_every,
                   "store the denoise state every k steps (0: never)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  serve->add_option("--max-queued-jobs", serve_opts.cluster.max_queued_jobs)
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  serve->add_option("--journal", serve_opts.cluster.journal_path,
                    "SQLite journal of accepted jobs");
  serve->add_flag("--demo", serve_opts.demo,
                  "submit demo images and a video, write them to --out, print figures, exit");
  serve->add_option("--out", serve_opts.out_dir, "demo output directory")->capture_default_str();
  serve->add_flag("--exit-on-stdin-eof", serve_opts.exit_on_eof,
                  "stop when stdin closes (for supervisors)");

  sluice::cli::GenerateOptions gen_opts;
  int gen_steps = 0;
  CLI::App* generate =
      app.add_subcommand("generate", "submit one image or video to a server and save it");
  generate->add_option("--server", gen_opts.server, "orchestrator HTTP endpoint")
      ->capture_default_str();
  generate->add_option("--prompt", gen_opts.request.prompt)->required();
  generate->add_flag("--video", gen_opts.request.video, "generate a video (default: an image)");
  generate->add_option("--frames", gen_opts.request.frames, "video frames")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  generate->add_option("--size", gen_opts.request.size, "WIDTHxHEIGHT (default: the server's)");
  generate->add_option("--steps", gen_steps, "denoise steps (default: the server's)")
      ->check(CLI::Range(1, 1000));
  generate->add_option("--seed", gen_opts.request.seed)->capture_default_str();
  generate->add_option("--priority", gen_opts.request.priority)
      ->check(CLI::IsMember({"interactive", "standard", "batch"}))
      ->capture_default_str();
  generate->add_option("-o,--output", gen_opts.output, "file to write")->required();
  generate->add_option("--timeout", gen_opts.timeout_s, "seconds to wait")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();

  sluice::StoreNodeConfig node_config;
  std::string node_listen = "127.0.0.1:0", node_memory = "1GiB";
  CLI::App* store_node =
      app.add_subcommand("store-node", "contribute memory to the store (runs until stopped)");
  store_node->add_option("--master", node_config.master, "master host:port")->required();
  store_node->add_option("--memory", node_memory, "memory to contribute")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  store_node->add_option("--segments", node_config.segments, "split the memory into N segments")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  store_node->add_option("--listen", node_listen, "transfer-engine endpoint host:port")
      ->capture_default_str();
  store_node->add_option("--node-id", node_config.node_id, "default: the engine endpoint");
  std::string node_disk_size = "0";
  store_node->add_option("--disk", node_config.disk_dir, "directory for the disk tier");
  store_node->add_option("--disk-size", node_disk_size, "disk tier size (needs --disk)")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  store_node->add_flag("--exit-on-stdin-eof", exit_on_eof,
                       "stop when stdin closes (for supervisors)");

  sluice::bench::TransferBenchOptions opts;
  std::string op = "write", block = "16MiB", slice = "1MiB";
  bool json = false;
  CLI::App* transfer = bench->add_subcommand(
      "transfer", "transfer engine throughput between two processes on loopback");
  transfer->add_option("--transport", opts.transport, "tcp or shm")
      ->check(CLI::IsMember({"tcp", "shm"}))
      ->capture_default_str();
  transfer->add_option("--op", op, "read or write")
      ->check(CLI::IsMember({"read", "write"}))
      ->capture_default_str();
  transfer->add_option("--block-size", block, "bytes per op")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  transfer->add_option("--batch", opts.batch, "ops per batch")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  transfer->add_option("--threads", opts.threads, "initiator threads, each with its own batches")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  transfer->add_option("--duration", opts.duration_s, "seconds per measurement")
      ->check(CLI::Range(0.01, 600.0))
      ->capture_default_str();
  transfer->add_option("--io-threads", opts.io_threads, "engine I/O threads per process")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  transfer->add_option("--connections", opts.connections, "tcp connections per peer")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  transfer->add_option("--slice-size", slice, "tcp slice size")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  transfer->add_flag("--json", json, "print one JSON object");

  sluice::bench::StoreBenchOptions store_opts;
  std::string value_size = "16MiB";
  CLI::App* store_bench = bench->add_subcommand(
      "store", "store put/get through a master and a store node, against raw engine batches");
  store_bench->add_option("--value-size", value_size, "bytes per object")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  store_bench->add_option("--op", store_opts.op, "put or get")
      ->check(CLI::IsMember({"put", "get"}))
      ->capture_default_str();
  store_bench->add_option("--transport", store_opts.transport, "the client's transport: shm or tcp")
      ->check(CLI::IsMember({"tcp", "shm"}))
      ->capture_default_str();
  store_bench->add_option("--clients", store_opts.clients, "client threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  store_bench->add_option("--duration", store_opts.duration_s, "seconds")
      ->check(CLI::Range(0.01, 600.0))
      ->capture_default_str();
  bool store_json = false;
  store_bench->add_flag("--json", store_json, "print one JSON object");

  sluice::bench::ConnectorBenchOptions conn_opts;
  std::string conn_shape = "1,16,21,90,160";
  CLI::App* conn_bench = bench->add_subcommand(
      "connector", "publish/consume/release through the connector, against raw engine batches");
  conn_bench->add_option("--mode", conn_opts.mode, "p2p or store")
      ->check(CLI::IsMember({"p2p", "store"}))
      ->capture_default_str();
  conn_bench->add_option("--transport", conn_opts.transport, "shm or tcp")
      ->check(CLI::IsMember({"tcp", "shm"}))
      ->capture_default_str();
  conn_bench->add_option("--shape", conn_shape, "comma-separated dimensions")
      ->capture_default_str();
  conn_bench->add_option("--dtype", conn_opts.dtype, "bf16, f16, f32, u8, ...")
      ->capture_default_str();
  conn_bench->add_option("--chunks", conn_opts.chunks, "chunks per payload")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  conn_bench->add_option("--chunk-dim", conn_opts.chunk_dim, "dimension the chunks cut")
      ->capture_default_str();
  conn_bench
      ->add_option("--chunk-work-us", conn_opts.chunk_work_us,
                   "consumer work per chunk (microseconds)")
      ->capture_default_str();
  conn_bench->add_option("--duration", conn_opts.duration_s, "seconds")
      ->check(CLI::Range(0.01, 600.0))
      ->capture_default_str();
  bool conn_json = false;
  conn_bench->add_flag("--json", conn_json, "print one JSON object (the only output format)");

  sluice::bench::E2eBenchOptions e2e_opts;
  CLI::App* e2e_bench = bench->add_subcommand(
      "e2e", "jobs through an embedded deployment over HTTP: throughput, latency, TTFF");
  e2e_bench
      ->add_option("--workload", e2e_opts.workload,
                   "reference, wan480-profile, flux-profile or mixed")
      ->check(CLI::IsMember({"reference", "wan480-profile", "flux-profile", "mixed"}))
      ->capture_default_str();
  e2e_bench->add_option("--mode", e2e_opts.mode, "disagg or colocated")
      ->check(CLI::IsMember({"disagg", "colocated"}))
      ->capture_default_str();
  e2e_bench->add_option("--workers", e2e_opts.workers, "stage workers in all (equal across modes)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  e2e_bench->add_option("--rate", e2e_opts.rate, "job arrivals per second (Poisson)")
      ->check(CLI::Range(0.001, 1000.0))
      ->capture_default_str();
  e2e_bench->add_option("--duration", e2e_opts.duration_s, "arrival window, seconds")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  e2e_bench->add_option("--warmup", e2e_opts.warmup_s, "seconds of arrivals served, not measured")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  e2e_bench->add_option("--time-factor", e2e_opts.time_factor, "profile timings scale")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  e2e_bench
      ->add_option("--light-stages", e2e_opts.light_stages,
                   "disagg: encode/decode on every denoise worker (shared) or one edge worker")
      ->check(CLI::IsMember({"shared", "edge"}))
      ->capture_default_str();
  bool e2e_json = true;
  e2e_bench->add_flag("--json", e2e_json, "print one JSON object (the only output format)");

  sluice::bench::OrchestratorBenchOptions orch_opts;
  CLI::App* orch_bench =
      bench->add_subcommand("orchestrator", "scheduler core decisions per second (no I/O)");
  orch_bench->add_option("--jobs", orch_opts.jobs, "jobs through encode, denoise, decode")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{10000000}))
      ->capture_default_str();
  orch_bench->add_option("--workers", orch_opts.workers, "workers, split over the stages")
      ->check(CLI::Range(3, 100000))
      ->capture_default_str();
  bool orch_json = true;
  orch_bench->add_flag("--json", orch_json, "print one JSON object (the only output format)");

  std::uint64_t region_size = 0;
  bool shared = false;
  int target_io = 2;
  CLI::App* target = bench->add_subcommand("transfer-target", "internal: the benchmark's target");
  target->group("");  // Hidden from --help.
  target->add_option("--region-size", region_size)->required();
  target->add_option("--io-threads", target_io);
  target->add_flag("--shared", shared);

  CLI11_PARSE(app, argc, argv);
  if (sluice::Status s = sluice::SetLogLevel(log_level); !s.ok()) {
    std::cerr << "sluice: " << s.message() << "\n";
    return 2;
  }
  if (*master) {
    master_config.reservation_ttl = std::chrono::milliseconds(reservation_ttl_ms);
    return RunMaster(master_config, exit_on_eof);
  }
  if (*serve) {
    serve_opts.cluster.store_memory = *sluice::ParseByteSize(serve_memory);
    if (serve_opts.demo && serve->count("--http") == 0) {
      serve_opts.cluster.http_listen = "127.0.0.1:0";  // Never collide with a running server.
    }
    return sluice::cli::RunServe(serve_opts);
  }
  if (*generate) {
    if (gen_steps > 0) {
      gen_opts.request.steps = gen_steps;
    }
    return sluice::cli::RunGenerate(gen_opts);
  }
  if (*worker) {
    return sluice::cli::RunWorker(worker_opts, exit_on_eof);
  }
  if (*orch) {
    orch_config.worker_timeout = std::chrono::milliseconds(worker_timeout_ms);
    return RunOrchestrator(orch_config, exit_on_eof);
  }
  if (*store_node) {
    node_config.memory_bytes = *sluice::ParseByteSize(node_memory);
    node_config.disk_bytes = *sluice::ParseByteSize(node_disk_size);
    if (node_config.disk_dir.empty() != (node_config.disk_bytes == 0)) {
      std::cerr << "sluice store-node: --disk and --disk-size go together\n";
      return 2;
    }
    return RunStoreNode(node_listen, node_config, exit_on_eof);
  }
  if (*target) {
    return sluice::bench::RunTransferTarget(region_size, shared, target_io);
  }
  if (*e2e_bench) {
    auto r = sluice::bench::RunE2eBench(e2e_opts);
    if (!r.ok()) {
      std::cerr << "sluice bench e2e: " << r.status().ToString() << "\n";
      return r.status().code() == sluice::StatusCode::kInvalidArgument ? 2 : 1;
    }
    std::cout << sluice::bench::ToJson(*r) << std::endl;
    return 0;
  }
  if (*orch_bench) {
    auto r = sluice::bench::RunOrchestratorBench(orch_opts);
    if (!r.ok()) {
      std::cerr << "sluice bench orchestrator: " << r.status().ToString() << "\n";
      return 1;
    }
    std::cout << sluice::bench::ToJson(*r) << std::endl;
    return 0;
  }
  if (*conn_bench) {
    conn_opts.shape.clear();
    for (std::size_t at = 0; at <= conn_shape.size();) {
      const std::size_t comma = std::min(conn_shape.find(',', at), conn_shape.size());
      const std::string dim = conn_shape.substr(at, comma - at);
      if (dim.empty() || dim.find_first_not_of("0123456789") != std::string::npos ||
          dim.size() > 9) {
        std::cerr << "sluice bench connector: --shape: '" << conn_shape
                  << "' is not a list of dimensions like 1,16,21,90,160\n";
        return 2;
      }
      conn_opts.shape.push_back(std::stoll(dim));
      at = comma + 1;
    }
    auto r = sluice::bench::RunConnectorBench(conn_opts, SelfExe());
    if (!r.ok()) {
      std::cerr << "sluice bench connector: " << r.status().ToString() << "\n";
      return 1;
    }
    std::cout << sluice::bench::ToJson(*r) << std::endl;
    return 0;
  }
  if (*store_bench) {
    store_opts.value_size = *sluice::ParseByteSize(value_size);
    auto r = sluice::bench::RunStoreBench(store_opts, SelfExe());
    if (!r.ok()) {
      std::cerr << "sluice bench store: " << r.status().ToString() << "\n";
      return 1;
    }
    std::cout << sluice::bench::ToJson(*r) << std::endl;
    return 0;
  }
  if (*transfer) {
    opts.op = op == "read" ? sluice::OpKind::kRead : sluice::OpKind::kWrite;
    opts.block_size = *sluice::ParseByteSize(block);
    opts.slice_size = *sluice::ParseByteSize(slice);
    auto r = sluice::bench::RunTransferBench(opts, SelfExe());
    if (!r.ok()) {
      std::cerr << "sluice bench transfer: " << r.status().ToString() << "\n";
      return 1;
    }
    std::cout << (json ? sluice::bench::ToJson(*r) : sluice::bench::ToText(*r)) << std::endl;
  }
  return 0;
}
