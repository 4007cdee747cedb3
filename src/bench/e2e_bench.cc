#include "bench/e2e_bench.h"

#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "sluice/client/http_client.h"
#include "sluice/serve/embedded.h"

#include "bench/bench_util.h"
#include "bench/job_timeline.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Sent {
  std::string id;
  Clock::time_point at;
  bool interactive = false;
  bool warmup = false;  // Arrived during the warm-up: served, not measured.
};

// What job `i` of the workload asks for.
client::GenerateRequest JobFor(const std::string& workload, int i) {
  const E2eJobKind k = E2eJobModel(workload, i);
  client::GenerateRequest r;
  r.prompt = "benchmark job " + std::to_string(i);
  r.seed = i;
  r.video = k.video;
  r.priority = k.priority;
  if (workload == "reference") {
    r.size = r.video ? "320x192" : "256x256";
    r.frames = 17;
  } else {
    r.model = k.model;
  }
  return r;
}

}  // namespace

E2eJobKind E2eJobModel(const std::string& workload, int i) {
  const bool video_turn = i % 5 == 4;  // 4:1 images to videos by count.
  if (workload == "reference") {
    return {"reference", video_turn ? "batch" : "interactive", video_turn};
  }
  if (workload == "wan480-profile") {
    return {"wan2.1-480p", "standard", true};
  }
  if (workload == "flux-profile") {
    return {"flux-1024", "standard", false};
  }
  return video_turn ? E2eJobKind{"wan2.1-480p", "batch", true}
                    : E2eJobKind{"flux-1024", "interactive", false};
}

std::vector<PlannedJob> PlanE2eArrivals(const E2eBenchOptions& o) {
  std::vector<PlannedJob> out;
  std::mt19937_64 rng(42);
  std::exponential_distribution<double> gap(o.rate);
  double next = 0;
  for (int i = 0; next < o.warmup_s + o.duration_s; ++i, next += gap(rng)) {
    out.push_back({next, i, next < o.warmup_s});
  }
  return out;
}

Status ValidateE2eOptions(const E2eBenchOptions& o) {
  if (o.workload != "reference" && o.workload != "wan480-profile" && o.workload != "flux-profile" &&
      o.workload != "mixed") {
    return InvalidArgumentError("--workload: reference, wan480-profile, flux-profile or mixed");
  }
  if (o.mode != "disagg" && o.mode != "colocated") {
    return InvalidArgumentError("--mode: disagg or colocated");
  }
  if (o.workers < (o.mode == "disagg" && o.light_stages == "edge" ? 2 : 1) || o.workers > 64) {
    return InvalidArgumentError("--workers: 1..64 (2..64 with an edge worker)");
  }
  if (o.light_stages != "edge" && o.light_stages != "shared" && o.light_stages != "pools") {
    return InvalidArgumentError("--light-stages: edge, shared or pools");
  }
  if (o.mode == "disagg" && o.light_stages == "pools" &&
      (o.encode_workers < 1 || o.decode_workers < 1 ||
       o.encode_workers + o.decode_workers >= o.workers)) {
    return InvalidArgumentError(
        "--encode-workers/--decode-workers: at least 1 each, leaving a denoise worker of "
        "--workers " +
        std::to_string(o.workers));
  }
  if (!(o.rate > 0 && o.rate <= 1000) || !(o.duration_s > 0 && o.duration_s <= 3600)) {
    return InvalidArgumentError("--rate must be in (0, 1000] and --duration in (0, 3600]");
  }
  if (o.latent_chunks < 1 || o.latent_chunks > 64) {
    return InvalidArgumentError("--latent-chunks must be in 1..64");
  }
  if (!(o.warmup_s >= 0 && o.warmup_s <= 600)) {
    return InvalidArgumentError("--warmup must be in [0, 600]");
  }
  if (o.denoise_batch < 1 || o.denoise_batch > 64 ||
      (o.denoise_batch > 1 && o.workload != "reference")) {
    return InvalidArgumentError("--denoise-batch: 1..64, above 1 with the reference workload");
  }
  return Status::Ok();
}

Result<E2eBenchResult> RunE2eBench(const E2eBenchOptions& o) {
  SLUICE_RETURN_IF_ERROR(ValidateE2eOptions(o));
  EmbeddedConfig c;
  c.http_listen = "127.0.0.1:0";
  c.workers = o.workers;
  c.colocated = o.mode == "colocated";
  // Disaggregated at the same worker count as colocated: the light stages
  // (encode, decode) run on one edge worker, or on every denoise worker.
  const bool pools = o.light_stages == "pools";
  c.encode_workers = pools ? o.encode_workers : 0;
  c.decode_workers = pools ? o.decode_workers : 0;
  c.decode_slots = pools ? 1 : 0;
  c.edge_workers = o.light_stages == "edge" ? 1 : 0;
  c.light_on_denoise = o.light_stages == "shared";
  c.stages = o.workload == "reference"
                 ? "reference"
                 : (o.workload == "wan480-profile" ? "wan2.1-480p" : "flux-1024");
  c.time_factor = o.time_factor;
  c.latent_chunks = o.latent_chunks;
  c.denoise_batch = o.denoise_batch;
  c.max_queued_jobs = 100000;
  c.worker_timeout = std::chrono::seconds(30);  // Loaded 2-core machines stall heartbeats.
  SLUICE_ASSIGN_OR_RETURN(auto cluster, EmbeddedCluster::Start(c));
  const std::string url = "http://" + cluster->http_endpoint();

  E2eBenchResult out;
  out.options = o;
  std::vector<Sent> sent;
  const Clock::time_point start = Clock::now();
  for (const PlannedJob& p : PlanE2eArrivals(o)) {
    std::this_thread::sleep_until(
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(p.at_s)));
    const client::GenerateRequest r = JobFor(o.workload, p.index);
    const bool warmup = p.warmup;
    out.submitted += warmup ? 0 : 1;
    Result<std::string> id = client::Submit(url, r);
    if (!id.ok()) {
      out.rejected += warmup ? 0 : 1;
      continue;
    }
    sent.push_back({*id, Clock::now(), r.priority == "interactive", warmup});
  }
  httplib::Client http(url);
  http.set_read_timeout(3600, 0);
  std::vector<double> latency, ttff, interactive_ttff, first_output_in_decode;
  std::map<std::string, double> busy;
  std::map<std::string, std::vector<double>> stage_busy;
  std::map<std::string, std::map<std::string, std::vector<double>>> parts;
  double end_s = 0;
  for (const Sent& s : sent) {
    const Timeline t = ReadTimeline(http, s.id);
    if (s.warmup) {
      continue;  // Waited for (it finished), not measured.
    }
    if (!t.succeeded) {
      ++out.failed;
      continue;
    }
    ++out.succeeded;
    latency.push_back(t.latency_s);
    if (t.ttff_s >= 0) {
      ttff.push_back(t.ttff_s);
      if (s.interactive) {
        interactive_ttff.push_back(t.ttff_s);
      }
    } else {
      ++out.jobs_without_first_output;
    }
    for (const auto& [stage, b] : t.busy_s) {
      busy[stage] += b;
      stage_busy[stage].push_back(b);
    }
    for (const auto& [stage, ms] : t.stage_ms) {
      for (const auto& [part, v] : ms) {
        parts[stage][part].push_back(v);
      }
    }
    if (t.first_output_in_stage_s >= 0) {
      first_output_in_decode.push_back(t.first_output_in_stage_s);
    }
    end_s = std::max(
        end_s, std::chrono::duration<double>(s.at - start).count() + t.latency_s - o.warmup_s);
  }
  // Seconds from the end of the warm-up to the last measured finish.
  out.seconds = end_s;
  out.throughput = end_s > 0 ? out.succeeded / end_s : 0;
  out.p50_latency_s = Percentile(latency, 0.5);
  out.p99_latency_s = Percentile(latency, 0.99);
  out.p50_ttff_s = Percentile(ttff, 0.5);
  out.p99_ttff_s = Percentile(ttff, 0.99);
  out.interactive_p99_ttff_s = Percentile(interactive_ttff, 0.99);
  out.interactive_jobs = static_cast<int>(interactive_ttff.size());
  for (auto& [stage, b] : stage_busy) {
    out.stage_p50_s[stage] = Percentile(b, 0.5);
  }
  out.first_output_in_decode_p50_s = Percentile(first_output_in_decode, 0.5);
  for (auto& [stage, by_part] : parts) {
    for (auto& [part, v] : by_part) {
      out.stage_breakdown_p50_ms[stage][part] = Percentile(v, 0.5);
    }
  }
  // Busy fraction per pool; encode and decode add up on the workers that
  // serve them (the edge worker, or every denoise worker) unless each has
  // its own.
  const int denoise = c.workers - c.edge_workers - c.encode_workers - c.decode_workers;
  for (const auto& [stage, b] : busy) {
    std::string pool =
        c.colocated ? "colocated" : (stage == "denoise" ? "denoise" : "encode+decode");
    int n = c.colocated || stage == "denoise" || c.light_on_denoise ? denoise : 1;
    if (pools && stage != "denoise") {
      pool = stage;
      n = stage == "encode" ? c.encode_workers : c.decode_workers;
    }
    out.utilization[pool] += end_s > 0 ? b / (n * end_s) : 0;
  }
  return out;
}

std::string ToJson(const E2eBenchResult& r) {
  json j = {{"workload", r.options.workload},
            {"mode", r.options.mode},
            {"workers", r.options.workers},
            {"rate", r.options.rate},
            {"duration_s", r.options.duration_s},
            {"warmup_s", r.options.warmup_s},
            {"time_factor", r.options.time_factor},
            {"light_stages", r.options.light_stages},
            {"latent_chunks", r.options.latent_chunks},
            {"encode_workers", r.options.encode_workers},
            {"decode_workers", r.options.decode_workers},
            {"submitted", r.submitted},
            {"succeeded", r.succeeded},
            {"failed", r.failed},
            {"rejected", r.rejected},
            {"seconds", r.seconds},
            {"throughput", r.throughput},
            {"p50_latency_s", r.p50_latency_s},
            {"p99_latency_s", r.p99_latency_s},
            {"p50_ttff_s", r.p50_ttff_s},
            {"p99_ttff_s", r.p99_ttff_s},
            {"interactive_jobs", r.interactive_jobs},
            {"jobs_without_first_output", r.jobs_without_first_output},
            {"interactive_p99_ttff_s",
             r.interactive_jobs > 0 ? json(r.interactive_p99_ttff_s) : json(nullptr)},
            {"utilization", r.utilization},
            {"stage_p50_s", r.stage_p50_s},
            {"first_output_in_decode_p50_s", r.first_output_in_decode_p50_s},
            {"stage_breakdown_p50_ms", r.stage_breakdown_p50_ms}};
  if (r.options.denoise_batch > 1) {
    j["denoise_batch"] = r.options.denoise_batch;
  }
  return j.dump();
}

}  // namespace sluice::bench
