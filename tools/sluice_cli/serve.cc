#include "sluice_cli/serve.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "sluice/connector/connector.h"
#include "sluice/runtime/profile_stages.h"
#include "sluice/runtime/reference_stages.h"
#include "sluice/runtime/stage_worker.h"
#include "sluice/store/client.h"
#include "sluice/units.h"

#include "orchestrator/core/model.h"
#include "sluice_cli/role_metrics.h"
#include "sluice_cli/signals.h"

namespace sluice::cli {

using client::BaseUrl;
using client::FetchPreview;
using client::GenerateRequest;
using client::JobOutcome;
using client::JobProgress;
using client::Preview;
using client::Submit;
using client::WaitAndFetch;
namespace {

using Clock = std::chrono::steady_clock;

std::string Extension(const std::string& content_type) {
  if (content_type == "image/png") {
    return ".png";
  }
  if (content_type == "video/mp4") {
    return ".mp4";
  }
  if (content_type.find("tar") != std::string::npos) {
    return ".tar";
  }
  return ".bin";
}

Status WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) {
    return Status(StatusCode::kInternal, "cannot write " + path);
  }
  return Status::Ok();
}

// The demo's work: interactive images and a batch video, submitted at once,
// with prompts of the grammar the reference model was trained on
// (docs/models/sluice-reference.md) at its training size.
std::vector<GenerateRequest> DemoJobs() {
  std::vector<GenerateRequest> jobs;
  const char* prompts[] = {
      "a large red circle on the left on a blue background",
      "a small yellow triangle at the top on a black background",
      ("a large white square on the right and a small green diamond on the left on a purple "
       "background"),
      "a large cyan diamond in the centre on a red background"};
  std::int64_t seed = 1;
  for (const char* p : prompts) {
    GenerateRequest r;
    r.prompt = p;
    r.size = "128x128";
    r.seed = seed++;
    r.priority = "interactive";
    jobs.push_back(r);
  }
  GenerateRequest v;
  v.prompt = "a large yellow circle moving right on a blue background";
  v.video = true;
  v.size = "128x128";
  v.frames = 17;
  v.seed = 7;
  v.priority = "batch";
  jobs.push_back(v);
  return jobs;
}

// `api_key`: sent with every request (the server's first key when it has
// --api-keys; empty: the API is open).
int RunDemo(const std::string& base_url, const std::string& out_dir, const std::string& api_key) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    std::cerr << "sluice serve: --out: cannot create " << out_dir << ": " << ec.message() << "\n";
    return 1;
  }
  const std::vector<GenerateRequest> jobs = DemoJobs();
  struct Submitted {
    std::string id;
    Clock::time_point at;
  };
  std::vector<Submitted> ids;
  const Clock::time_point start = Clock::now();
  for (GenerateRequest r : jobs) {
    r.api_key = api_key;
    const Clock::time_point at = Clock::now();
    Result<std::string> id = Submit(base_url, r);
    if (!id.ok()) {
      std::cerr << "sluice serve --demo: " << id.status().ToString() << "\n";
      return 1;
    }
    ids.push_back({*id, at});
  }
  // Files are named by the demo's own numbering (job ids are 128 random
  // bits); the id column shows the start of each job id.
  std::printf("%-4s %-14s %-6s %-11s %9s %8s %9s  %s\n", "#", "job", "kind", "status", "latency_s",
              "ttff_s", "bytes", "file");
  int ok = 0;
  std::vector<double> latencies;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    Result<JobOutcome> o =
        WaitAndFetch(base_url, ids[i].id, jobs[i].video, ids[i].at, std::chrono::minutes(10),
                     client::WaitOptions{api_key, nullptr, nullptr, {}});
    if (!o.ok()) {
      std::cerr << "sluice serve --demo: " << o.status().ToString() << "\n";
      return 1;
    }
    std::string file = "-";
    if (o->status == "succeeded") {
      const std::string name = (jobs[i].video ? "video-" : "image-") + std::to_string(i + 1);
      file = (std::filesystem::path(out_dir) / (name + Extension(o->content_type))).string();
      if (Status s = WriteFile(file, o->content); !s.ok()) {
        std::cerr << "sluice serve --demo: " << s.ToString() << "\n";
        return 1;
      }
      ++ok;
      latencies.push_back(o->latency_s);
    }
    std::printf("%-4zu %-14s %-6s %-11s %9.2f %8.2f %9zu  %s%s\n", i + 1,
                (o->id.substr(0, 12) + "..").c_str(), jobs[i].video ? "video" : "image",
                o->status.c_str(), o->latency_s, o->ttff_s, o->content.size(), file.c_str(),
                o->error.empty() ? "" : ("  " + o->error).c_str());
  }
  std::sort(latencies.begin(), latencies.end());
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("demo: %d/%zu jobs succeeded in %.2f s (p50 latency %.2f s); results in %s/\n", ok,
              jobs.size(), wall, latencies.empty() ? 0.0 : latencies[latencies.size() / 2],
              out_dir.c_str());
  return ok == static_cast<int>(jobs.size()) ? 0 : 1;
}

}  // namespace

int RunServe(const ServeOptions& o) {
  BlockStopSignals();
  auto cluster = EmbeddedCluster::Start(o.cluster);
  if (!cluster.ok()) {
    std::cerr << "sluice serve: " << cluster.status().ToString() << "\n";
    return cluster.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const EmbeddedConfig& c = o.cluster;
  const std::string url =
      (c.http.tls_cert_pem.empty() ? "http://" : "https://") + (*cluster)->http_endpoint();
  std::string layout = std::to_string(c.workers) + " colocated workers";
  if (!c.colocated) {
    layout = std::to_string(c.encode_workers) + " encode, " +
             std::to_string(c.workers - c.encode_workers - c.decode_workers - c.edge_workers) +
             " denoise, " + std::to_string(c.decode_workers) + " decode, " +
             std::to_string(c.edge_workers) + " edge (encode + decode) workers";
  }
  std::cout << "sluice serve: " << layout << ", " << c.stages << " stages; store master "
            << (*cluster)->master_endpoint() << ", orchestrator "
            << (*cluster)->orchestrator_endpoint() << std::endl;
  std::cout << "READY serve " << url << std::endl;
  if (o.demo) {
    const auto& keys = o.cluster.access.keys;
    const int rc = RunDemo(url, o.out_dir, keys.empty() ? "" : keys.begin()->first);
    (*cluster)->Drain(std::chrono::seconds(10));
    return rc;
  }
  std::cout << "try: sluice generate --server " << url
            << " --prompt \"a large red circle on the left on a blue background\" -o circle.png"
            << std::endl;
  WaitForStopSignal(o.exit_on_eof);
  std::cout << "sluice serve: draining" << std::endl;
  (*cluster)->Drain(std::chrono::seconds(30));
  return 0;
}

namespace {

// `sluice generate`'s progress: one line rewritten in place on a terminal;
// elsewhere a plain line per status or stage change and per tenth of the
// steps.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(std::string id)
      : id_(std::move(id)), tty_(::isatty(STDOUT_FILENO) == 1) {}
  ~ProgressPrinter() {
    if (tty_ && printed_) {
      std::printf("\n");
    }
  }
  bool tty() const { return tty_; }
  void operator()(const JobProgress& p) {
    const int tenth = p.steps > 0 ? 10 * p.step / p.steps : 0;
    if (!tty_ && p.status == last_.status && p.stage == last_.stage && tenth == tenth_ &&
        (p.ttff_s >= 0) == (last_.ttff_s >= 0)) {
      return;
    }
    std::string line = id_ + " " + p.status + " " + p.stage;
    if (p.step > 0) {  // Stages without steps report 0.
      line += " step " + std::to_string(p.step) + "/" + std::to_string(p.steps);
    }
    char times[64];
    std::snprintf(times, sizeof(times), ", %.1f s", p.elapsed_s);
    line += times;
    if (p.ttff_s >= 0) {
      std::snprintf(times, sizeof(times), ", ttff %.2f s", p.ttff_s);
      line += times;
    }
    std::printf(tty_ ? "\r\033[K%s" : "%s\n", line.c_str());
    std::fflush(stdout);
    printed_ = true;
    last_ = p;
    tenth_ = tenth;
  }

 private:
  std::string id_;
  bool tty_;
  bool printed_ = false;
  JobProgress last_;
  int tenth_ = -1;
};

}  // namespace

int RunGenerate(const GenerateOptions& o) {
  Result<std::string> base = BaseUrl(o.server);
  if (!base.ok()) {
    std::cerr << "sluice generate: --" << base.status().message() << "\n";
    return 2;
  }
  const std::atomic<bool>* stop = StopFlagOnSignals();
  const Clock::time_point at = Clock::now();
  Result<std::string> id = Submit(*base, o.request);
  if (!id.ok()) {
    std::cerr << "sluice generate: " << id.status().message() << "\n";
    return id.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  Result<JobOutcome> out = [&] {
    ProgressPrinter printer(*id);
    client::WaitOptions w;
    w.api_key = o.request.api_key;
    w.ca_file = o.request.ca_file;
    int shown = 0;  // The step of the newest preview written.
    const std::string preview_file = o.output + ".preview.png";
    int steps = 0;
    // A newer preview of the current prediction, written over the last one.
    auto show_preview = [&] {
      Result<Preview> pv = FetchPreview(*base, *id, o.request.api_key, o.request.ca_file);
      if (pv.ok() && pv->step > shown && WriteFile(preview_file, pv->png).ok()) {
        shown = pv->step;
        std::printf("%spreview of step %d/%d -> %s\n", printer.tty() ? "\r\033[K" : "", pv->step,
                    steps, preview_file.c_str());
        std::fflush(stdout);
      }
    };
    w.on_progress = [&](const JobProgress& p) {
      printer(p);
      steps = std::max(steps, p.steps);
      if (o.request.preview_every.has_value() && p.step > shown) {
        show_preview();
      }
    };
    w.stop = stop;
    Result<JobOutcome> done =
        WaitAndFetch(*base, *id, o.request.video, at, std::chrono::seconds(o.timeout_s), w);
    if (done.ok() && o.request.preview_every.has_value()) {
      show_preview();  // The last step's, sent just before denoise ended.
    }
    return done;
  }();
  if (!out.ok()) {
    std::cerr << "sluice generate: " << out.status().message() << "\n";
    // Killed by a signal: the shell's convention, 128 + its number.
    return out.status().code() == StatusCode::kCancelled ? 128 + StopSignal() : 1;
  }
  if (out->status != "succeeded") {
    std::cerr << "sluice generate: " << *id << " " << out->status << ": " << out->error << "\n";
    return 1;
  }
  if (Status s = WriteFile(o.output, out->content); !s.ok()) {
    std::cerr << "sluice generate: " << s.message() << "\n";
    return 1;
  }
  std::printf("%s: %zu bytes (%s) in %.2f s, ttff %.2f s -> %s\n", id->c_str(), out->content.size(),
              out->content_type.c_str(), out->latency_s, out->ttff_s, o.output.c_str());
  return 0;
}

int RunWorker(const WorkerOptions& o, bool exit_on_eof) {
  BlockStopSignals();
  // What each stage of the built-in models does comes from their declared
  // pipeline's kinds (the flags' help names the stages for users).
  const orchestrator::PipelineRoles& roles = orchestrator::StandardRoles();
  if (o.colocated && o.stage != roles.loop) {
    std::cerr << "sluice worker: --colocated workers join the denoise pool (--stage denoise)\n";
    return 2;
  }
  if (!(o.time_factor > 0 && o.time_factor <= 1)) {
    std::cerr << "sluice worker: --time-factor must be in (0, 1]\n";
    return 2;
  }
  if (o.profile.empty() && o.checkpoint_every > 0 && o.master.empty() && o.stage == roles.loop) {
    std::cerr << "sluice worker: --checkpoint-every needs --master (checkpoints live in the "
                 "store); pass --checkpoint-every 0 to run without\n";
    return 2;
  }
  if (o.cfg_sharing && (o.master.empty() || o.stage != roles.loop)) {
    std::cerr << "sluice worker: --cfg-sharing is for --stage denoise with --master (the shared "
                 "keys live in the store)\n";
    return 2;
  }
  Result<ModelProfile> profile = ModelProfile{};
  if (!o.profile.empty()) {
    profile = FindModelProfile(o.profile);
    if (!profile.ok()) {
      std::cerr << "sluice worker: --profile: " << profile.status().message() << "\n";
      return 2;
    }
  }
  // Profile encode caches only when asked: its declared encoder is the
  // profile's, so it serves that model alone, and its entries live in the
  // store.
  const bool profile_conditions = !o.profile.empty() && o.condition_cache_given &&
                                  o.condition_cache && o.stage == roles.condition && !o.colocated;
  if (profile_conditions && o.master.empty()) {
    std::cerr << "sluice worker: --condition-cache needs --master (the entries live in the "
                 "store)\n";
    return 2;
  }
  if (profile_conditions && !(o.models.empty() || o.models == std::vector{o.profile})) {
    std::cerr << "sluice worker: --condition-cache with --profile " << o.profile
              << " serves that model only (its encoder is the profile's); drop --model\n";
    return 2;
  }
  ConnectorConfig cc;
  cc.role = o.stage;
  cc.store.master = o.master;
  cc.store.resolve_master = o.resolve_master;
  cc.engine.listen = o.listen;
  cc.engine.advertise = o.advertise;
  if (!o.transports.empty()) {
    cc.engine.transports = o.transports;
  }
  cc.security = o.security;
  auto mode = ParseTransferMode(o.mode);
  if (!mode.ok()) {
    std::cerr << "sluice worker: --mode: " << mode.status().message() << "\n";
    return 2;
  }
  cc.mode = *mode;
  auto conn = DiffusionConnector::Create(cc);
  if (!conn.ok()) {
    std::cerr << "sluice worker: " << conn.status().ToString() << "\n";
    return 1;
  }
  // The worker's own store client: checkpoints (reference stages), and
  // removing the payloads of a Done report no orchestrator took.
  std::unique_ptr<StoreClient> store;
  if (!o.master.empty()) {
    StoreClientConfig sc;
    sc.master = o.master;
    sc.resolve_master = o.resolve_master;
    sc.security = o.security;
    // Its reads and writes are small (conditions, checkpoints) and the job
    // waits on them: a node that does not answer fails them in seconds
    // (the stage is retried or its input recomputed), not in a minute. A
    // master restart is still waited out (master_retry).
    sc.transfer_timeout = std::chrono::seconds(10);
    auto client = StoreClient::Create(&(*conn)->engine(), sc);
    if (!client.ok()) {
      std::cerr << "sluice worker: " << client.status().ToString() << "\n";
      return 1;
    }
    store = std::move(*client);
  }
  // Encode: each text's embedding through the condition cache.
  std::unique_ptr<cache::Cache> conditions;
  if (store != nullptr && !o.colocated && o.stage == roles.condition && o.condition_cache &&
      (o.profile.empty() || profile_conditions)) {
    auto c = cache::Cache::Create(store.get(), cache::CacheOptions{});
    if (!c.ok()) {
      std::cerr << "sluice worker: " << c.status().ToString() << "\n";
      return 1;
    }
    conditions = std::move(*c);
  }
  std::unique_ptr<cache::Cache> features;  // CFG branch sharing.
  if (store != nullptr && o.profile.empty() && o.stage == roles.loop && o.cfg_sharing) {
    cache::CacheOptions fo;
    fo.name = "feature";
    auto c = cache::Cache::Create(store.get(), fo);
    if (!c.ok()) {
      std::cerr << "sluice worker: " << c.status().ToString() << "\n";
      return 1;
    }
    features = std::move(*c);
  }
  Result<StageHandler> handler = StageHandler();
  if (!o.profile.empty()) {
    ProfileCaches caches;
    caches.conditions = conditions.get();
    caches.store = store.get();  // Denoise: cached inputs.
    handler = o.colocated
                  ? ProfileColocatedHandler(*profile, o.time_factor)
                  : ProfileStageHandler(*profile, o.stage, conn->get(), o.time_factor, 1, caches);
  } else {
    ReferenceStageOptions ro;
    ro.default_steps = o.steps;
    ro.step_cache_threshold = o.step_cache_threshold;
    ro.adapter_cache_bytes = static_cast<std::size_t>(*ParseByteSize(o.adapter_cache));
    ro.denoise_batch = o.denoise_batch;
    ro.interactive_alone = o.interactive_alone;
    if (store != nullptr) {
      ro.store = store.get();
      ro.checkpoint_every = o.checkpoint_every;
    }
    ro.condition_cache = conditions.get();
    ro.feature_cache = features.get();
    handler = o.colocated ? ReferenceColocatedHandler(ro)
                          : ReferenceStageHandler(o.stage, conn->get(), ro);
  }
  if (!handler.ok()) {
    std::cerr << "sluice worker: " << handler.status().message() << "\n";
    return 2;
  }
  // Before registering: the first job should not open the store's
  // connections and mappings (~0.1 s per stage here).
  if (Status s = (*conn)->Warm(); !s.ok()) {
    std::cerr << "sluice worker: warming the store connections: " << s.ToString()
              << " (serving anyway)\n";
  }
  StageWorkerConfig wc;
  wc.orchestrator = o.orchestrator;
  wc.resolve_orchestrator = o.resolve_orchestrator;
  wc.stage = o.stage;
  wc.models = o.models;
  if (wc.models.empty()) {
    wc.models = {o.profile.empty() ? std::string(kReferenceModelName) : o.profile};
  }
  if (o.profile.empty()) {  // The reference stages: they read edits' pictures too.
    wc.image_size = wc.video_size = std::string(kReferenceTrainedSize);
    wc.takes_picture = true;
  }
  wc.capacity = std::max(o.capacity, o.denoise_batch);  // A batch needs its jobs at once.
  wc.name = o.stage + "@" + (*conn)->engine().endpoint();
  wc.security = o.security;
  wc.engine = &(*conn)->engine();
  if (conditions != nullptr) {
    wc.condition_encoder =
        o.profile.empty() ? ReferenceConditionEncoder() : ProfileConditionEncoder(*profile);
    wc.caches = {conditions.get()};
  }
  if (features != nullptr) {
    wc.caches = {features.get()};
  }
  wc.assignment_timeout = std::chrono::milliseconds(o.assignment_timeout_ms);
  if (o.assignment_timeout_ms == 0 && !o.profile.empty()) {
    wc.assignment_timeout = ProfileLease(*profile, o.stage, o.time_factor);
    for (const std::string& s :
         {roles.condition, roles.output}) {  // One colocated assignment runs them all.
      wc.assignment_timeout =
          o.colocated ? std::max(wc.assignment_timeout, ProfileLease(*profile, s, o.time_factor))
                      : wc.assignment_timeout;
    }
  }
  if (store != nullptr) {
    wc.discard_payloads = [client = store.get()](const std::vector<std::string>& keys) {
      for (const std::string& k : keys) {
        if (Status s = client->Remove(k); !s.ok() && s.code() != StatusCode::kNotFound) {
          std::cerr << "sluice worker: removing unreported payload '" << k << "': " << s.ToString()
                    << "\n";
        }
      }
    };
  }
  // The metrics endpoint first: a port it cannot take stops the worker
  // before it registers. Declared after `worker`, so it stops first.
  std::unique_ptr<StageWorker> worker;
  std::atomic<const StageWorker*> live{nullptr};
  Result<std::unique_ptr<internal::MetricsEndpoint>> metrics =
      StartRoleMetrics("sluice worker", o.listen, o.metrics_port,
                       [&live, c = conn->get(), caches = wc.caches, stage = o.stage,
                        capacity = o.capacity](bool om) {
                         const StageWorker* w = live.load();
                         StageWorkerMetrics m;
                         if (w != nullptr) {
                           m = w->Metrics();
                         } else {  // Not started yet.
                           m.stage = stage;
                           m.capacity = capacity;
                         }
                         return WorkerMetricsText(m, *c, caches, om);
                       });
  if (!metrics.ok()) {
    std::cerr << "sluice worker: --metrics-port: " << metrics.status().message() << "\n";
    return 2;
  }
  auto started = StageWorker::Start(wc, std::move(*handler));
  if (!started.ok()) {
    std::cerr << "sluice worker: " << started.status().ToString() << "\n";
    return 2;
  }
  worker = std::move(*started);
  live.store(worker.get());
  // READY only once the orchestrator knows it; until then the worker
  // retries (logging each failure), and a stop signal (or EOF on stdin)
  // still stops it.
  if (exit_on_eof) {
    StopOnStdinEof();
  }
  while (!worker->WaitRegistered(std::chrono::milliseconds(200))) {
    if (StopSignalPending()) {
      std::cerr << "sluice worker: stopped before the orchestrator at " << o.orchestrator
                << " accepted it\n";
      return 1;
    }
  }
  std::cout << "READY worker " << o.stage << " " << (*conn)->engine().endpoint() << " "
            << (*metrics != nullptr ? (*metrics)->endpoint() : "-") << std::endl;
  WaitForStopSignal(exit_on_eof);
  worker->Drain(std::chrono::seconds(30));
  return 0;
}

}  // namespace sluice::cli
