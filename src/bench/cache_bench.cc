#include "bench/cache_bench.h"

#include <httplib.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "sluice/runtime/model_profiles.h"
#include "sluice/serve/embedded.h"

#include "bench/bench_util.h"
#include "bench/job_timeline.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

Status Validate(const CacheBenchOptions& o) {
  if (o.prompts < 1 || o.prompts > 1000000 || o.negatives < 1 || o.negatives > 1000) {
    return InvalidArgumentError("--prompts must be 1..1000000 and --negatives 1..1000");
  }
  if (!(o.zipf >= 0 && o.zipf <= 10)) {
    return InvalidArgumentError("--zipf must be in 0..10");
  }
  if (o.jobs < 1 || o.jobs > 100000 || !(o.rate > 0 && o.rate <= 1000)) {
    return InvalidArgumentError("--jobs must be 1..100000 and --rate in (0, 1000]");
  }
  if (o.sweep_encode < 0 || o.sweep_encode > 16) {
    return InvalidArgumentError("--sweep-encode must be 0..16");
  }
  if (o.denoise_workers < 1 || o.denoise_workers > 32) {
    return InvalidArgumentError("--denoise-workers must be 1..32");
  }
  if (o.workload != "reference") {
    SLUICE_ASSIGN_OR_RETURN(const ModelProfile p, FindModelProfile(o.workload));
    if (p.video) {
      return InvalidArgumentError("--workload " + o.workload +
                                  ": a video profile; the cache bench runs image jobs");
    }
    if (!(o.time_factor > 0 && o.time_factor <= 1)) {
      return InvalidArgumentError("--time-factor must be in (0, 1]");
    }
  }
  if (o.steps < 1 || o.steps > 100 || o.resume_steps < 2 || o.resume_steps > 100 ||
      o.resume_step < 1 || o.resume_step >= o.resume_steps) {
    return InvalidArgumentError(
        "--steps must be 1..100, --resume-steps 2..100, --resume-step 1..resume-steps-1");
  }
  return Status::Ok();
}

// The job stream: prompt i drawn Zipf(s) over `prompts`, negatives uniform.
std::vector<json> Jobs(const CacheBenchOptions& o) {
  std::vector<double> weights(static_cast<std::size_t>(o.prompts));
  for (int i = 0; i < o.prompts; ++i) {
    weights[static_cast<std::size_t>(i)] = 1.0 / std::pow(i + 1.0, o.zipf);
  }
  std::mt19937_64 rng(7);
  std::discrete_distribution<int> prompt(weights.begin(), weights.end());
  std::uniform_int_distribution<int> negative(0, o.negatives - 1);
  std::vector<json> jobs;
  for (int i = 0; i < o.jobs; ++i) {
    jobs.push_back({{"prompt", "prompt " + std::to_string(prompt(rng))},
                    {"negative_prompt", "negative " + std::to_string(negative(rng))},
                    {"size", "64x64"},
                    {"steps", o.steps},
                    {"seed", i},
                    {"async", true}});
    if (o.workload != "reference") {
      jobs.back()["model"] = o.workload;
    }
  }
  return jobs;
}

Result<std::unique_ptr<EmbeddedCluster>> Deploy(const CacheBenchOptions& o, bool cache, bool cfg,
                                                int encode_workers = 1) {
  EmbeddedConfig c;
  c.http_listen = "127.0.0.1:0";
  c.workers = encode_workers + o.denoise_workers + 1;  // And one decode worker.
  c.encode_workers = encode_workers;
  c.decode_workers = 1;
  c.condition_cache = cache;
  c.cfg_sharing = cfg;
  if (o.workload != "reference") {
    c.stages = o.workload;
    c.time_factor = o.time_factor;
    c.profile_condition_cache = cache;
  }
  c.max_queued_jobs = 100000;
  c.worker_timeout = std::chrono::seconds(30);  // Loaded 2-core machines stall heartbeats.
  return EmbeddedCluster::Start(c);
}

// The value of metric line `name` (labels included) at `url`; 0 if absent.
double Metric(httplib::Client& http, const std::string& name) {
  auto r = http.Get("/metrics");
  if (!r) {
    return 0;
  }
  const std::size_t at = r->body.find("\n" + name + " ");
  return at == std::string::npos ? 0 : std::stod(r->body.substr(at + name.size() + 2));
}

Result<std::string> Post(httplib::Client& http, const json& body) {
  auto r = http.Post("/v1/images/generations", body.dump(), "application/json");
  if (!r || r->status / 100 != 2) {
    return UnavailableError("submit: " + (r ? r->body : std::string("no answer")),
                            FailureScope::kRequest);
  }
  return json::parse(r->body).value("id", "");
}

// Every cache kind's counters: the workers' from the orchestrator's
// `/metrics` (`sluice_cache_<field>_total{kind="K"} V`), the store's from
// its master.
void ReadCacheKinds(httplib::Client& http, const EmbeddedCluster& cluster, CacheRun* run) {
  // Workers report their counters with their heartbeats (every 200 ms):
  // a few of them bring in the last jobs' counts.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  if (auto r = http.Get("/metrics"); r && r->status == 200) {
    const std::string prefix = "sluice_cache_", kind = "_total{kind=\"";
    std::istringstream in(r->body);
    for (std::string line; std::getline(in, line);) {
      const std::size_t k = line.find(kind), close = line.find("\"} ");
      if (line.rfind(prefix, 0) != 0 || k == std::string::npos || close == std::string::npos) {
        continue;
      }
      const std::string field = line.substr(prefix.size(), k - prefix.size());
      const std::string name = line.substr(k + kind.size(), close - k - kind.size());
      run->kinds[name][field] = std::strtod(line.c_str() + close + 3, nullptr);
    }
  }
  const MasterMetrics m = cluster.store_metrics();
  for (const auto& [name, c] : m.cache_classes) {
    auto& k = run->kinds[name];
    k["objects"] = static_cast<double>(c.objects);
    k["bytes"] = static_cast<double>(c.bytes);
    k["budget_bytes"] = static_cast<double>(c.budget_bytes);
    k["evictions"] = static_cast<double>(c.evictions);
  }
  run->soft_pins = m.soft_pins;
}

Result<CacheRun> RunJobs(EmbeddedCluster& cluster, const std::vector<json>& jobs, double rate) {
  httplib::Client http("http://" + cluster.http_endpoint());
  http.set_read_timeout(3600, 0);
  std::vector<std::pair<std::string, Clock::time_point>> sent;
  std::mt19937_64 rng(42);
  std::exponential_distribution<double> gap(rate);
  const Clock::time_point start = Clock::now();
  double next = 0;
  for (const json& j : jobs) {
    std::this_thread::sleep_until(
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(next)));
    next += gap(rng);
    SLUICE_ASSIGN_OR_RETURN(std::string id, Post(http, j));
    sent.emplace_back(id, Clock::now());
  }
  CacheRun run;
  std::vector<double> latency, ttff;
  double encode = 0, denoise = 0, end_s = 0;
  for (const auto& [id, at] : sent) {
    const Timeline t = ReadTimeline(http, id);
    if (!t.succeeded) {
      ++run.failed;
      continue;
    }
    ++run.succeeded;
    run.skipped_encode += t.cache_hit ? 1 : 0;
    latency.push_back(t.latency_s);
    if (t.ttff_s >= 0) {
      ttff.push_back(t.ttff_s);
    }
    encode += t.busy_s.count("encode") ? t.busy_s.at("encode") : 0;
    denoise += t.busy_s.count("denoise") ? t.busy_s.at("denoise") : 0;
    end_s = std::max(end_s, std::chrono::duration<double>(at - start).count() + t.latency_s);
  }
  const double n = std::max(1, run.succeeded);
  run.encode_busy_per_job_s = encode / n;
  run.denoise_busy_per_job_s = denoise / n;
  run.p50_latency_s = Percentile(latency, 0.5);
  run.p99_latency_s = Percentile(latency, 0.99);
  run.p99_ttff_s = Percentile(ttff, 0.99);
  run.throughput = end_s > 0 ? run.succeeded / end_s : 0;
  ReadCacheKinds(http, cluster, &run);
  return run;
}

// A job keeping its checkpoints, then the same job resumed from step k:
// their denoise busy seconds (median of three pairs).
Result<double> ResumeRatio(EmbeddedCluster& cluster, const CacheBenchOptions& o) {
  httplib::Client http("http://" + cluster.http_endpoint());
  http.set_read_timeout(600, 0);
  std::vector<double> ratios;
  for (int i = 0; i < 3; ++i) {
    json full = {{"prompt", "resume " + std::to_string(i)},
                 {"size", "128x128"},
                 {"steps", o.resume_steps},
                 {"seed", i},
                 {"keep_checkpoints", true},
                 {"async", true}};
    SLUICE_ASSIGN_OR_RETURN(std::string a, Post(http, full));
    const Timeline ta = ReadTimeline(http, a);
    json resumed = full;
    resumed.erase("keep_checkpoints");
    resumed["resume_from"] = {{"job", a}, {"step", o.resume_step}};
    SLUICE_ASSIGN_OR_RETURN(std::string b, Post(http, resumed));
    const Timeline tb = ReadTimeline(http, b);
    if (!ta.succeeded || !tb.succeeded || ta.busy_s.count("denoise") == 0) {
      return InternalError("resume: a job failed");
    }
    ratios.push_back(tb.busy_s.at("denoise") / ta.busy_s.at("denoise"));
  }
  return Percentile(ratios, 0.5);
}

}  // namespace

Result<CacheBenchResult> RunCacheBench(const CacheBenchOptions& o) {
  SLUICE_RETURN_IF_ERROR(Validate(o));
  const std::vector<json> jobs = Jobs(o);
  CacheBenchResult out;
  out.options = o;
  const bool reference = o.workload == "reference";
  {
    SLUICE_ASSIGN_OR_RETURN(auto cluster, Deploy(o, /*cache=*/false, /*cfg=*/false));
    SLUICE_ASSIGN_OR_RETURN(out.off, RunJobs(*cluster, jobs, o.rate));
  }
  {
    SLUICE_ASSIGN_OR_RETURN(auto cluster, Deploy(o, /*cache=*/true, /*cfg=*/false));
    SLUICE_ASSIGN_OR_RETURN(out.on, RunJobs(*cluster, jobs, o.rate));
    httplib::Client http("http://" + cluster->http_endpoint());
    auto rate = [&](const std::string& field) {
      const std::string label = "{field=\"" + field + "\"}";
      const double looked = Metric(http, "sluice_orchestrator_condition_lookups_total" + label);
      return looked > 0 ? Metric(http, "sluice_orchestrator_condition_hits_total" + label) / looked
                        : 0;
    };
    out.prompt_hit_rate = rate("prompt");
    out.negative_hit_rate = rate("negative_prompt");
    if (reference) {
      SLUICE_ASSIGN_OR_RETURN(out.resume_denoise_ratio, ResumeRatio(*cluster, o));
    }
  }
  if (reference) {
    SLUICE_ASSIGN_OR_RETURN(auto cluster, Deploy(o, /*cache=*/true, /*cfg=*/true));
    SLUICE_ASSIGN_OR_RETURN(out.cfg, RunJobs(*cluster, jobs, o.rate));
  }
  for (const bool cache : {true, false}) {
    auto& sweep = cache ? out.encode_sweep : out.encode_sweep_off;
    for (int e = 1; e <= o.sweep_encode; ++e) {
      SLUICE_ASSIGN_OR_RETURN(auto cluster, Deploy(o, cache, /*cfg=*/false, e));
      SLUICE_ASSIGN_OR_RETURN(CacheRun run, RunJobs(*cluster, jobs, o.rate));
      sweep.emplace_back(e, run.p99_ttff_s);
    }
    int& fewest = cache ? out.fewest_encode_workers : out.fewest_encode_workers_off;
    for (const auto& [e, p99] : sweep) {
      if (p99 <= 1.1 * sweep.back().second) {
        fewest = e;
        break;
      }
    }
  }
  out.encode_work_ratio = out.off.encode_busy_per_job_s > 0
                              ? out.on.encode_busy_per_job_s / out.off.encode_busy_per_job_s
                              : 0;
  out.cfg_denoise_ratio = out.on.denoise_busy_per_job_s > 0
                              ? out.cfg.denoise_busy_per_job_s / out.on.denoise_busy_per_job_s
                              : 0;
  out.resume_target =
      reference ? static_cast<double>(o.resume_steps - o.resume_step) / o.resume_steps + 0.1 : 0;
  return out;
}

std::string ToJson(const CacheBenchResult& r) {
  auto run = [](const CacheRun& c) {
    return json{{"succeeded", c.succeeded},
                {"failed", c.failed},
                {"skipped_encode", c.skipped_encode},
                {"encode_busy_per_job_s", c.encode_busy_per_job_s},
                {"denoise_busy_per_job_s", c.denoise_busy_per_job_s},
                {"p50_latency_s", c.p50_latency_s},
                {"p99_latency_s", c.p99_latency_s},
                {"p99_ttff_s", c.p99_ttff_s},
                {"throughput", c.throughput},
                {"cache_kinds", c.kinds},
                {"soft_pins", c.soft_pins}};
  };
  const CacheBenchOptions& o = r.options;
  const bool reference = o.workload == "reference";
  json j = {{"workload", o.workload},
            {"denoise_workers", o.denoise_workers},
            {"prompts", o.prompts},
            {"zipf", o.zipf},
            {"negatives", o.negatives},
            {"jobs", o.jobs},
            {"rate", o.rate},
            {"steps", o.steps},
            {"cache_off", run(r.off)},
            {"cache_on", run(r.on)},
            {"cache_on_cfg_sharing", run(r.cfg)},
            {"prompt_hit_rate", r.prompt_hit_rate},
            {"negative_hit_rate", r.negative_hit_rate},
            {"encode_work_ratio", r.encode_work_ratio},
            {"cfg_denoise_ratio", r.cfg_denoise_ratio},
            {"resume_step", o.resume_step},
            {"resume_steps", o.resume_steps},
            {"resume_denoise_ratio", r.resume_denoise_ratio},
            {"resume_target", r.resume_target},
            {"fewest_encode_workers", r.fewest_encode_workers},
            {"fewest_encode_workers_cache_off", r.fewest_encode_workers_off}};
  auto sweep = [](const std::vector<std::pair<int, double>>& points) {
    json a = json::array();
    for (const auto& [e, p99] : points) {
      a.push_back({{"encode_workers", e}, {"p99_ttff_s", p99}});
    }
    return a;
  };
  j["encode_sweep"] = sweep(r.encode_sweep);
  j["encode_sweep_cache_off"] = sweep(r.encode_sweep_off);
  if (!reference) {
    // Not run: CFG sharing and resume need the reference stages.
    j["time_factor"] = o.time_factor;
    for (const char* k : {"cache_on_cfg_sharing", "cfg_denoise_ratio", "resume_step",
                          "resume_steps", "resume_denoise_ratio", "resume_target"}) {
      j[k] = nullptr;
    }
  }
  return j.dump();
}

}  // namespace sluice::bench
