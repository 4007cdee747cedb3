// `sluice bench ...`: benchmarks that print figures (JSON), each against a
// baseline measured in the same run.
#include <unistd.h>

#include <iostream>
#include <memory>

#include "sluice/units.h"

#include "bench/batch_forward_bench.h"
#include "bench/batching_bench.h"
#include "bench/cache_bench.h"
#include "bench/connector_bench.h"
#include "bench/http_bench.h"
#include "bench/journal_bench.h"
#include "bench/orchestrator_bench.h"
#include "bench/preview_bench.h"
#include "bench/step_cache_bench.h"
#include "bench/store_bench.h"
#include "bench/transfer_bench.h"
#include "sluice_cli/bench_report.h"
#include "sluice_cli/commands.h"

namespace sluice::cli {
namespace {

std::string SelfExe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("sluice");
}

void AddTransfer(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::TransferBenchOptions b;
    std::string op = "write", block = "16MiB", slice = "1MiB";
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = bench.add_subcommand(
      "transfer", "transfer engine throughput between two processes on loopback");
  cmd->add_option("--transport", o->b.transport,
                  "tcp, shm, ucx (host memory; UCX_TLS picks UCX's own transports) or devipc "
                  "(same host: a peer's device memory, or device memory here with a peer's host "
                  "memory)")
      ->check(CLI::IsMember({"tcp", "shm", "ucx", "devipc"}))
      ->capture_default_str();
  cmd->add_option("--op", o->op, "read or write")
      ->check(CLI::IsMember({"read", "write"}))
      ->capture_default_str();
  cmd->add_option("--block-size", o->block, "bytes per op")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  cmd->add_option("--batch", o->b.batch, "ops per batch")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--threads", o->b.threads, "initiator threads, each with its own batches")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--duration", o->b.duration_s, "seconds per measurement")
      ->check(CLI::Range(0.01, 600.0))
      ->capture_default_str();
  cmd->add_option("--io-threads", o->b.io_threads, "engine I/O threads per process")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--connections", o->b.connections, "tcp connections per peer")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--slice-size", o->slice, "tcp slice size")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  cmd->add_option("--src-kind", o->b.src_kind, "where the bytes come from: host or device memory")
      ->check(CLI::IsMember({"host", "device"}))
      ->capture_default_str();
  cmd->add_option("--dst-kind", o->b.dst_kind, "where the bytes go: host or device memory")
      ->check(CLI::IsMember({"host", "device"}))
      ->capture_default_str();
  cmd->add_option("--device", o->b.device,
                  "device backend of device memory: sim (host memory behaving as a device) or "
                  "cuda")
      ->check(CLI::IsMember({"sim", "cuda"}))
      ->capture_default_str();
  cmd->add_flag("--credential-ab", o->b.credential_ab,
                "also run a pair whose engines derive their secret from a cluster credential, "
                "alternating rounds with the open pair (credential_gbps, credential_ratio)");
  cmd->add_flag("--encrypt-ab", o->b.encrypt_ab,
                "also run a pair with a cluster credential and encrypted payload (tcp), in the "
                "same alternating rounds (encrypted_gbps, encrypted_ratio)");
  cmd->add_option("--target-netns", o->b.target_netns,
                  "start the target in this network namespace (another host on this machine; "
                  "tcp only)");
  cmd->add_option("--target-address", o->b.target_address,
                  "IPv4 address the target listens on and this process dials")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object");
  out->push_back({cmd, [o] {
                    o->b.op = o->op == "read" ? OpKind::kRead : OpKind::kWrite;
                    o->b.block_size = *ParseByteSize(o->block);
                    o->b.slice_size = *ParseByteSize(o->slice);
                    auto r = bench::RunTransferBench(o->b, SelfExe());
                    if (!r.ok()) {
                      std::cerr << "sluice bench transfer: " << r.status().ToString() << "\n";
                      return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
                    }
                    std::cout << (o->json ? bench::ToJson(*r) : bench::ToText(*r)) << std::endl;
                    return 0;
                  }});
}

void AddStore(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::StoreBenchOptions b;
    std::string value_size = "16MiB";
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = bench.add_subcommand(
      "store", "store put/get through a master and a store node, against raw engine batches");
  cmd->add_option("--value-size", o->value_size, "bytes per object")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  cmd->add_option("--op", o->b.op, "put or get")
      ->check(CLI::IsMember({"put", "get"}))
      ->capture_default_str();
  cmd->add_option("--transport", o->b.transport, "the client's transport: shm, tcp or ucx")
      ->check(CLI::IsMember({"tcp", "shm", "ucx"}))
      ->capture_default_str();
  cmd->add_option("--clients", o->b.clients, "client threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--duration", o->b.duration_s, "seconds")
      ->check(CLI::Range(0.01, 600.0))
      ->capture_default_str();
  cmd->add_flag("--credential-ab", o->b.credential_ab,
                "also run a store with a cluster credential, alternating rounds with the open "
                "one (credential_gbps, credential_ratio)");
  cmd->add_flag("--durable-ab", o->b.durable_ab,
                "also run a store whose master has durable commits, alternating rounds with the "
                "plain one (durable_gbps, durable_ratio)");
  cmd->add_option("--target-netns", o->b.target_netns,
                  "run the master, the store node and the raw target in this network namespace "
                  "(another host on this machine; tcp only), and a plain socket beside them "
                  "(socket_gbps, socket_ratio)");
  cmd->add_option("--target-address", o->b.target_address,
                  "IPv4 address they listen on there and this process dials")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object (the only output format)");
  out->push_back({cmd, [o] {
                    o->b.value_size = *ParseByteSize(o->value_size);
                    return Report("store", bench::RunStoreBench(o->b, SelfExe()));
                  }});
}

// "1,16,21,90,160" -> dimensions; false if it is not such a list.
bool ParseShape(const std::string& text, std::vector<std::int64_t>* shape) {
  shape->clear();
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string dim = text.substr(at, comma - at);
    if (dim.empty() || dim.find_first_not_of("0123456789") != std::string::npos || dim.size() > 9) {
      return false;
    }
    shape->push_back(std::stoll(dim));
    at = comma + 1;
  }
  return true;
}

void AddConnector(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::ConnectorBenchOptions b;
    std::string shape = "1,16,21,90,160";
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = bench.add_subcommand(
      "connector", "publish/consume/release through the connector, against raw engine batches");
  cmd->add_option("--mode", o->b.mode, "p2p or store")
      ->check(CLI::IsMember({"p2p", "store"}))
      ->capture_default_str();
  cmd->add_option("--transport", o->b.transport, "shm or tcp")
      ->check(CLI::IsMember({"tcp", "shm"}))
      ->capture_default_str();
  cmd->add_option("--shape", o->shape, "comma-separated dimensions")->capture_default_str();
  cmd->add_option("--dtype", o->b.dtype, "bf16, f16, f32, u8, ...")->capture_default_str();
  cmd->add_option("--chunks", o->b.chunks, "chunks per payload")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--chunk-dim", o->b.chunk_dim, "dimension the chunks cut")->capture_default_str();
  cmd->add_flag("--shared-tensors", o->b.shared_tensors,
                "publish from a connector-allocated tensor (same-host p2p readers map it)");
  cmd->add_flag("--in-place", o->b.in_place,
                "the consumer maps the payload instead of copying it (1 chunk; p2p needs "
                "--shared-tensors)");
  cmd->add_option("--device", o->b.device,
                  "where both tensors live: cpu, or device 0 of the sim or cuda backend")
      ->check(CLI::IsMember({"cpu", "sim", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--chunk-work-us", o->b.chunk_work_us, "consumer work per chunk (microseconds)")
      ->capture_default_str();
  cmd->add_flag("--overlap", o->b.overlap,
                "benchmark (b): also hand one payload over progressively (chunks made one by "
                "one, worked on as they land) against serially, and report the work hidden");
  cmd->add_option("--produce-us", o->b.produce_us,
                  "--overlap: the producer's time per chunk (its tail; 0: all at once)")
      ->capture_default_str();
  cmd->add_flag("--credential-ab", o->b.credential_ab,
                "also run a pair (and store) with a cluster credential, alternating rounds with "
                "the open one (credential_gbps, credential_ratio)");
  cmd->add_option("--duration", o->b.duration_s, "seconds")
      ->check(CLI::Range(0.01, 600.0))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object (the only output format)");
  out->push_back({cmd, [o] {
                    if (!ParseShape(o->shape, &o->b.shape)) {
                      std::cerr << "sluice bench connector: --shape: '" << o->shape
                                << "' is not a list of dimensions like 1,16,21,90,160\n";
                      return 2;
                    }
                    return Report("connector", bench::RunConnectorBench(o->b, SelfExe()));
                  }});
}

void AddCache(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::CacheBenchOptions b;
    bool json = true;
  };
  auto o = std::make_shared<Opts>();
  bench::CacheBenchOptions& b = o->b;
  CLI::App* cmd = bench.add_subcommand(
      "cache", "the condition cache, CFG sharing and resume on an embedded deployment");
  cmd->add_option("--prompts", b.prompts, "distinct prompts")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--zipf", b.zipf, "prompt popularity exponent (Zipf)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  cmd->add_option("--negatives", b.negatives, "distinct negative prompts (uniform)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--jobs", b.jobs, "jobs per run")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--rate", b.rate, "job arrivals per second (Poisson)")
      ->check(CLI::Range(0.001, 1000.0))
      ->capture_default_str();
  cmd->add_option("--steps", b.steps, "denoise steps per job")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--resume-step", b.resume_step, "the resumed job starts at this step")
      ->capture_default_str();
  cmd->add_option("--resume-steps", b.resume_steps, "the resumed job's steps")
      ->capture_default_str();
  cmd->add_option("--sweep-encode", b.sweep_encode,
                  "also run the stream at 1..N encode workers with the cache on and off and "
                  "report the fewest whose p99 TTFF is within 10% of N's (0: no sweep)")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  cmd->add_option("--workload", b.workload,
                  "reference, or an image profile (flux-1024, qwen-image-1024): published "
                  "timings x --time-factor; CFG sharing and resume run on reference only")
      ->capture_default_str();
  cmd->add_option("--time-factor", b.time_factor, "profile workloads: timings scale, (0, 1]")
      ->check(CLI::Range(0.0001, 1.0))
      ->capture_default_str();
  cmd->add_option("--denoise-workers", b.denoise_workers, "denoise workers")
      ->check(CLI::Range(1, 32))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object (the only output format)");
  out->push_back({cmd, [o] { return Report("cache", bench::RunCacheBench(o->b)); }});
}

void AddHttp(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::HttpBenchOptions b;
    bool json = true;
  };
  auto o = std::make_shared<Opts>();
  bench::HttpBenchOptions& b = o->b;
  CLI::App* cmd = bench.add_subcommand(
      "http", "the HTTP front of sluice serve under idle, streaming and waiting clients");
  cmd->add_option("--connections", b.connections, "idle connections held open")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--sse", b.sse, "event streams held open")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--sync", b.sync, "synchronous requests left waiting")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--probes", b.probes, "/healthz probes per phase")
      ->check(CLI::Range(10, 100000))
      ->capture_default_str();
  cmd->add_option("--submit-threads", b.submit_threads, "clients submitting async jobs")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--submit-seconds", b.submit_seconds, "how long they submit")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  cmd->add_option("--stages", b.stages, "the server's profile stages")->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object (the only output format)");
  out->push_back({cmd, [o] { return Report("http", bench::RunHttpBench(o->b, SelfExe())); }});
}

void AddOrchestratorBench(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::OrchestratorBenchOptions b;
    bool json = true;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      bench.add_subcommand("orchestrator", "scheduler core decisions per second (no I/O)");
  cmd->add_option("--jobs", o->b.jobs, "jobs through encode, denoise, decode")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{10000000}))
      ->capture_default_str();
  cmd->add_option("--workers", o->b.workers, "workers, split over the stages")
      ->check(CLI::Range(3, 100000))
      ->capture_default_str();
  cmd->add_option("--backlog", o->b.backlog,
                  "jobs kept in the system while the rest are submitted (a deep queue; the same "
                  "run without one is the baseline); 0: as many as the slots keep busy")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1000000}))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object (the only output format)");
  out->push_back({cmd, [o] { return Report("orchestrator", bench::RunOrchestratorBench(o->b)); }});
}

void AddPreview(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::PreviewBenchOptions b;
    bool json = true;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = bench.add_subcommand(
      "preview", "what a preview every denoise step costs the reference model (same run)");
  cmd->add_option("--rounds", o->b.rounds, "alternating pairs of jobs")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--steps", o->b.steps, "denoise steps")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--size", o->b.size, "WIDTHxHEIGHT")->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object (the only output format)");
  out->push_back({cmd, [o] { return Report("preview", bench::RunPreviewBench(o->b)); }});
}

void AddBatchForward(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::BatchForwardBenchOptions b;
    bool json = true;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = bench.add_subcommand(
      "batch-forward",
      "the reference denoiser's job-steps per second batched over one job at a time (same run)");
  cmd->add_option("--batch-sizes", o->b.batch_sizes, "jobs stepped together, each in 1..64")
      ->delimiter(',')
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--rounds", o->b.rounds, "alternating pairs of one-step sweeps per size")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--size", o->b.size, "WIDTHxHEIGHT of every job")->capture_default_str();
  cmd->add_option("--adapters", o->b.adapters,
                  "also time the batch with job j on LoRA adapter j mod K, mixed in one batch "
                  "and grouped by adapter, against it without (0: not)")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  cmd->add_option("--rank", o->b.rank, "those adapters' rank")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object (the only output format)");
  out->push_back({cmd, [o] { return Report("batch-forward", bench::RunBatchForwardBench(o->b)); }});
}

void AddBatching(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::BatchingBenchOptions b;
    bool json = true;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = bench.add_subcommand(
      "batching",
      "step-level batching in the denoise pool against one job per slot (reference workload, "
      "same run): throughput at saturation and interactive p99 TTFF at a load");
  cmd->add_option("--workers", o->b.workers, "workers of each deployment (equal in both)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--batch", o->b.batch, "jobs per denoise worker's batch")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  cmd->add_option("--saturation-rate", o->b.saturation_rate,
                  "arrivals per second of the saturation runs (above what is served)")
      ->check(CLI::Range(0.01, 1000.0))
      ->capture_default_str();
  cmd->add_option("--load", o->b.load, "the loaded runs' rate, a share of the unbatched throughput")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  cmd->add_option("--duration", o->b.duration_s, "seconds of arrivals measured per run")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--warmup", o->b.warmup_s, "seconds of arrivals before each run's measurement")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object (the only output format)");
  out->push_back({cmd, [o] { return Report("batching", bench::RunBatchingBench(o->b)); }});
}

void AddStepCache(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::StepCacheBenchOptions b;
    bool json = true;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = bench.add_subcommand(
      "step-cache",
      "the denoiser's step cache: speed-up and prompt adherence lost per threshold (same run)");
  cmd->add_option("--prompts", o->b.prompts, "captioned scenes, each generated once per setting")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--split", o->b.split, "scenes of: train | heldout")
      ->check(CLI::IsMember({"train", "heldout"}))
      ->capture_default_str();
  cmd->add_option("--seed", o->b.seed, "seed of the scenes drawn")->capture_default_str();
  cmd->add_option("--steps", o->b.steps, "denoise steps")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--guidance", o->b.guidance, "classifier-free guidance")
      ->check(CLI::Range(0.0f, 30.0f))
      ->capture_default_str();
  cmd->add_option("--thresholds", o->b.thresholds,
                  "step-cache thresholds to measure (relative L1, each in (0, 1])")
      ->delimiter(',')
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object (the only output format)");
  out->push_back({cmd, [o] { return Report("step-cache", bench::RunStepCacheBench(o->b)); }});
}

void AddJournal(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    bench::JournalBenchOptions b;
    bool json = true;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = bench.add_subcommand(
      "journal", "submissions per second the orchestrator's journal sustains: etcd vs SQLite");
  cmd->add_option("--etcd", o->b.etcd, "a running etcd, http://host:port[,...]")->required();
  cmd->add_option("--jobs", o->b.jobs, "jobs through each journal")
      ->check(CLI::Range(4, 100000))
      ->capture_default_str();
  cmd->add_option("--rounds", o->b.rounds, "alternating rounds")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--threads", o->b.threads, "concurrent submitters on the etcd journal")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--result-bytes", o->b.result_bytes,
                  "each job's result, kept in the journal (at most 1 MiB)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object (the only output format)");
  out->push_back({cmd, [o] { return Report("journal", bench::RunJournalBench(o->b)); }});
}

void AddTransferTarget(CLI::App& bench, std::vector<Command>* out) {
  struct Opts {
    std::uint64_t region_size = 0;
    bool shared = false;
    int io_threads = 2;
    std::string token_file;
    std::string device;
    std::string listen_address = "127.0.0.1";
    bool encrypt = false;
    bool ucx = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = bench.add_subcommand("transfer-target", "internal: the benchmark's target");
  cmd->group("");  // Hidden from --help.
  cmd->add_option("--region-size", o->region_size)->required();
  cmd->add_option("--io-threads", o->io_threads);
  cmd->add_flag("--shared", o->shared);
  cmd->add_option("--cluster-token", o->token_file);
  cmd->add_option("--device", o->device);
  cmd->add_option("--listen-address", o->listen_address);
  cmd->add_flag("--encrypt-data", o->encrypt);
  cmd->add_flag("--ucx", o->ucx);
  out->push_back({cmd, [o] {
                    return bench::RunTransferTarget(o->region_size, o->shared, o->io_threads,
                                                    o->token_file, o->device, o->listen_address,
                                                    o->encrypt, o->ucx);
                  }});
}

}  // namespace

void AddBenchCommands(CLI::App& bench, std::vector<Command>* out) {
  AddTransfer(bench, out);
  AddStore(bench, out);
  AddConnector(bench, out);
  AddE2eCommands(bench, out);
  AddCache(bench, out);
  AddHttp(bench, out);
  AddOrchestratorBench(bench, out);
  AddJournal(bench, out);
  AddPreview(bench, out);
  AddStepCache(bench, out);
  AddBatchForward(bench, out);
  AddBatching(bench, out);
  AddTransferTarget(bench, out);
}

}  // namespace sluice::cli
