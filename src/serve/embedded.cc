#include "sluice/serve/embedded.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "sluice/connector/connector.h"
#include "sluice/orchestrator/server.h"
#include "sluice/runtime/profile_stages.h"
#include "sluice/runtime/reference_stages.h"
#include "sluice/runtime/stage_worker.h"
#include "sluice/store/client.h"
#include "sluice/store/master.h"
#include "sluice/store/store_node.h"
#include "sluice/transfer/engine.h"

#include "common/log.h"
#include "common/random.h"
#include "orchestrator/core/autoscaler.h"
#include "orchestrator/core/model.h"
#include "serve/elastic.h"
#include "serve/embedded_impl.h"

namespace sluice {
namespace internal {

Status EmbeddedClusterImpl::AddWorker(const std::vector<std::string>& stages) {
  // Which stage does what comes from the pipeline's declared kinds.
  const orchestrator::PipelineRoles& roles = orchestrator::StandardRoles();
  EmbeddedWorker w;
  w.stages = stages;
  ConnectorConfig cc;
  cc.role = stages.size() == 1 ? stages[0] : "edge";
  cc.mode = TransferMode::kStore;
  cc.store.master = master->endpoint();
  cc.engine.io_threads = 1;
  cc.store_threads = 2;
  cc.security = security;
  SLUICE_ASSIGN_OR_RETURN(w.connector, DiffusionConnector::Create(cc));
  StoreClientConfig sc;
  sc.master = master->endpoint();
  sc.security = security;
  SLUICE_ASSIGN_OR_RETURN(w.checkpoints, StoreClient::Create(&w.connector->engine(), sc));
  // Before registering: its first job does not open the store's
  // connections and mappings. Best effort (the store is in this process).
  if (Status s = w.connector->Warm(); !s.ok()) {
    SLUICE_LOG(warn, "serve: warming a worker's store connections: {}", s.ToString());
  }
  for (const std::string& stage : stages) {
    const bool colocated = stage == "colocated";
    StageHandler handler;
    if (config.stages == "reference") {
      ReferenceStageOptions ro;
      ro.default_steps = config.default_steps;
      ro.checkpoint_every = config.checkpoint_every;
      ro.step_cache_threshold = config.step_cache_threshold;
      ro.denoise_batch = config.denoise_batch;
      ro.interactive_alone = config.interactive_alone;
      ro.store = w.checkpoints.get();
      if (stage == roles.condition && config.condition_cache) {
        SLUICE_ASSIGN_OR_RETURN(w.conditions,
                                cache::Cache::Create(w.checkpoints.get(), cache::CacheOptions{}));
        ro.condition_cache = w.conditions.get();
      }
      if ((stage == roles.loop || colocated) && config.cfg_sharing) {
        cache::CacheOptions fo;
        fo.name = "feature";
        SLUICE_ASSIGN_OR_RETURN(w.features, cache::Cache::Create(w.checkpoints.get(), fo));
        ro.feature_cache = w.features.get();
      }
      SLUICE_ASSIGN_OR_RETURN(handler, colocated
                                           ? ReferenceColocatedHandler(ro)
                                           : ReferenceStageHandler(stage, w.connector.get(), ro));
    } else {
      SLUICE_ASSIGN_OR_RETURN(ModelProfile p, FindModelProfile(config.stages));
      ProfileCaches caches;
      caches.store = w.checkpoints.get();
      if (stage == roles.condition && config.profile_condition_cache) {
        SLUICE_ASSIGN_OR_RETURN(w.conditions,
                                cache::Cache::Create(w.checkpoints.get(), cache::CacheOptions{}));
        caches.conditions = w.conditions.get();
      }
      handler = colocated ? ProfileColocatedHandler(p, config.time_factor)
                          : ProfileStageHandler(p, stage, w.connector.get(), config.time_factor,
                                                config.latent_chunks, caches);
    }
    StageWorkerConfig wc;
    wc.orchestrator = orchestrator->endpoint();
    wc.stage = colocated ? roles.loop : stage;
    if (config.stages == "reference") {
      wc.models = {std::string(kReferenceModelName)};
      wc.image_size = wc.video_size = std::string(kReferenceTrainedSize);
      wc.takes_picture = true;  // Edits and videos from a reference picture.
    } else if (stage == roles.condition && w.conditions != nullptr) {
      wc.models = {config.stages};  // Its declared encoder is this profile's.
    } else {
      for (const ModelProfile& p : ModelProfiles()) {
        wc.models.push_back(p.name);  // One pool of workers serves every profile model.
      }
    }
    if (stage == roles.condition && w.conditions != nullptr) {
      wc.condition_encoder = config.stages == "reference"
                                 ? ReferenceConditionEncoder()
                                 : ProfileConditionEncoder(*FindModelProfile(config.stages));
      wc.caches = {w.conditions.get()};
    }
    if ((stage == roles.loop || colocated) && w.features != nullptr) {
      wc.caches = {w.features.get()};
    }
    // A batching denoise worker takes as many jobs as it batches.
    wc.capacity = stage == roles.output ? decode_capacity
                  : (stage == roles.loop || colocated) && config.stages == "reference"
                      ? config.denoise_batch
                      : 1;
    wc.security = security;
    {
      MutexLock lock(workers_mu);
      wc.name = stage + "-" + std::to_string(next_worker++);
    }
    SLUICE_ASSIGN_OR_RETURN(auto reg, StageWorker::Start(wc, std::move(handler)));
    w.registrations.push_back(std::move(reg));
  }
  MutexLock lock(workers_mu);
  workers.push_back(std::move(w));
  return Status::Ok();
}

int EmbeddedClusterImpl::PoolWorkers(const std::string& stage) {
  MutexLock lock(workers_mu);
  int n = 0;
  for (const EmbeddedWorker& w : workers) {
    n += w.Serves(stage) && !w.draining ? 1 : 0;
  }
  return n;
}

EmbeddedClusterImpl::EmbeddedClusterImpl() = default;
EmbeddedClusterImpl::~EmbeddedClusterImpl() = default;

}  // namespace internal

namespace {

Status Validate(const EmbeddedConfig& c) {
  if (c.workers < 1 || c.workers > 64) {
    return InvalidArgumentError("workers: must be in 1..64");
  }
  if (!c.colocated) {
    if (c.encode_workers < 0 || c.decode_workers < 0 || c.edge_workers < 0) {
      return InvalidArgumentError("encode_workers/decode_workers/edge_workers: must be >= 0");
    }
    if (!c.light_on_denoise &&
        (c.encode_workers + c.edge_workers < 1 || c.decode_workers + c.edge_workers < 1)) {
      return InvalidArgumentError(
          "encode_workers/decode_workers: each pool needs a worker (or edge_workers >= 1)");
    }
    if (c.workers < c.encode_workers + c.decode_workers + c.edge_workers + 1) {
      return InvalidArgumentError(
          "workers: " + std::to_string(c.workers) + " leaves no denoise worker after " +
          std::to_string(c.encode_workers) + " encode, " + std::to_string(c.decode_workers) +
          " decode and " + std::to_string(c.edge_workers) + " edge workers");
    }
  }
  if (c.latent_chunks < 1 || c.latent_chunks > 64) {
    return InvalidArgumentError("latent_chunks: must be in 1..64");
  }
  if (c.decode_slots < 0 || c.decode_slots > 64) {
    return InvalidArgumentError("decode_slots: must be in 0..64 (0: 4 x denoise / decoders)");
  }
  if (c.store_memory < (std::uint64_t{16} << 20)) {
    return InvalidArgumentError("store_memory: at least 16 MiB");
  }
  if (c.stages != "reference") {
    SLUICE_RETURN_IF_ERROR(FindModelProfile(c.stages).status());
    if (!(c.time_factor > 0 && c.time_factor <= 1)) {
      return InvalidArgumentError("time_factor: must be in (0, 1]");
    }
  }
  if (c.default_steps < 1 || c.default_steps > 1000) {
    return InvalidArgumentError("default_steps: must be in 1..1000");
  }
  if (c.checkpoint_every < 0) {
    return InvalidArgumentError("checkpoint_every: must be >= 0");
  }
  if (!(c.step_cache_threshold >= 0 && c.step_cache_threshold <= 1)) {
    return InvalidArgumentError("step_cache_threshold: must be in 0..1 (0: off)");
  }
  if (c.elastic && !c.colocated && (c.light_on_denoise || c.edge_workers > 0)) {
    return InvalidArgumentError(
        "elastic: each pool needs workers of its own (no edge workers, no light stages on "
        "denoise workers)");
  }
  if (c.elastic && c.autoscale.max_workers > 64) {
    return InvalidArgumentError("elastic: max_workers must be at most 64 (the workers' bound)");
  }
  SLUICE_RETURN_IF_ERROR(orchestrator::ValidateAutoscaleOptions(c.autoscale));
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<EmbeddedCluster>> EmbeddedCluster::Start(const EmbeddedConfig& config) {
  SLUICE_RETURN_IF_ERROR(Validate(config));
  auto impl = std::make_unique<internal::EmbeddedClusterImpl>();
  impl->config = config;
  impl->security.token = internal::RandomId() + internal::RandomId();
  MasterConfig mc;
  mc.listen = "127.0.0.1:0";
  mc.security = impl->security;
  // Cached conditions hold at most a quarter of the store; the few texts
  // read most (common negative prompts) are soft-pinned.
  mc.cache_budgets = {{"condition", 0.25}, {"feature", 0.25}};
  mc.soft_pin_reads = 4;
  SLUICE_ASSIGN_OR_RETURN(impl->master, MasterServer::Start(mc));
  EngineConfig ec;
  ec.io_threads = 1;
  ec.secret = TransferSecret(impl->security);
  ec.encrypt_data = impl->security.encrypt_data;
  SLUICE_ASSIGN_OR_RETURN(impl->node_engine, TransferEngine::Create(ec));
  StoreNodeConfig nc;
  nc.master = impl->master->endpoint();
  nc.memory_bytes = config.store_memory;
  nc.security = impl->security;
  SLUICE_ASSIGN_OR_RETURN(impl->node, StoreNode::Start(impl->node_engine.get(), nc));
  OrchestratorConfig oc;
  oc.listen = "127.0.0.1:0";
  oc.http_listen = config.http_listen;
  oc.http = config.http;
  oc.limits = config.limits;
  oc.access = config.access;
  oc.max_queued_jobs = config.max_queued_jobs;
  oc.worker_timeout = config.worker_timeout;
  oc.store_master = impl->master->endpoint();
  oc.security = impl->security;
  oc.journal_path = config.journal_path;
  oc.colocated = config.colocated;
  oc.autoscale = config.autoscale;
  if (config.stages == "reference") {
    oc.adapters.dir = config.adapters_dir;
    oc.adapters.check = CheckReferenceAdapter;
  }
  // Disaggregated pools: denoise workers and the workers decoding.
  const int denoise =
      config.workers - config.encode_workers - config.decode_workers - config.edge_workers;
  const int decoders =
      config.decode_workers + config.edge_workers + (config.light_on_denoise ? denoise : 0);
  // Elastic: for the most denoise workers it may grow to.
  const int most = config.elastic ? std::max(denoise, config.autoscale.max_workers) : denoise;
  if (!config.colocated && config.decode_slots > 0) {
    impl->decode_capacity = config.decode_slots;
    oc.admission_overcommit =
        std::ceil(static_cast<double>(most) / (decoders * config.decode_slots));
  } else if (!config.colocated) {
    impl->decode_capacity = std::max(1, 4 * most / decoders);
  }
  oc.default_model =
      config.stages == "reference" ? std::string(kReferenceModelName) : config.stages;
  SLUICE_ASSIGN_OR_RETURN(impl->orchestrator, OrchestratorServer::Start(oc));
  const orchestrator::PipelineRoles& roles = orchestrator::StandardRoles();
  if (config.colocated) {
    for (int i = 0; i < config.workers; ++i) {
      SLUICE_RETURN_IF_ERROR(impl->AddWorker({"colocated"}));
    }
  } else {
    for (int i = 0; i < config.encode_workers; ++i) {
      SLUICE_RETURN_IF_ERROR(impl->AddWorker({roles.condition}));
    }
    for (int i = 0; i < config.edge_workers; ++i) {
      SLUICE_RETURN_IF_ERROR(impl->AddWorker({roles.condition, roles.output}));
    }
    for (int i = 0; i < denoise; ++i) {
      SLUICE_RETURN_IF_ERROR(
          impl->AddWorker(config.light_on_denoise
                              ? std::vector<std::string>{roles.condition, roles.loop, roles.output}
                              : std::vector<std::string>{roles.loop}));
    }
    for (int i = 0; i < config.decode_workers; ++i) {
      SLUICE_RETURN_IF_ERROR(impl->AddWorker({roles.output}));
    }
  }
  // The store node registers in the background; wait for it (bounded).
  for (int i = 0; i < 200 && impl->master->Metrics().nodes == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (impl->master->Metrics().nodes == 0) {
    return Status(StatusCode::kUnavailable,
                  "the store node did not register with the master within 2 s");
  }
  if (config.elastic) {
    impl->elastic = std::make_unique<internal::ElasticPools>(impl.get(), config.autoscale);
  }
  return std::unique_ptr<EmbeddedCluster>(new EmbeddedCluster(std::move(impl)));
}

EmbeddedCluster::EmbeddedCluster(std::unique_ptr<internal::EmbeddedClusterImpl> impl)
    : impl_(std::move(impl)) {}

EmbeddedCluster::~EmbeddedCluster() {
  Drain(std::chrono::seconds(5));
  {
    MutexLock lock(impl_->workers_mu);
    impl_->workers.clear();
  }
  impl_->orchestrator.reset();
  impl_->node.reset();
  impl_->node_engine.reset();
  impl_->master.reset();
}

const std::string& EmbeddedCluster::http_endpoint() const {
  return impl_->orchestrator->http_endpoint();
}

const std::string& EmbeddedCluster::orchestrator_endpoint() const {
  return impl_->orchestrator->endpoint();
}

const std::string& EmbeddedCluster::master_endpoint() const {
  return impl_->master->endpoint();
}

std::uint64_t EmbeddedCluster::store_bytes_used() const {
  return impl_->master->Metrics().used_bytes;
}

std::uint64_t EmbeddedCluster::store_job_objects() const {
  const MasterMetrics m = impl_->master->Metrics();
  return m.objects - m.objects_cached + m.objects_writing + m.reservations;
}

MasterMetrics EmbeddedCluster::store_metrics() const {
  return impl_->master->Metrics();
}

void EmbeddedCluster::Drain(std::chrono::milliseconds timeout) {
  impl_->elastic.reset();  // Its pools stay as they are; its drains end first.
  std::vector<StageWorker*> regs;
  {
    MutexLock lock(impl_->workers_mu);
    for (internal::EmbeddedWorker& w : impl_->workers) {
      for (auto& reg : w.registrations) {
        regs.push_back(reg.get());
      }
    }
  }
  // No worker comes or goes now: the elastic loop is gone.
  std::vector<std::thread> drains;
  for (StageWorker* reg : regs) {
    drains.emplace_back([reg, timeout] { reg->Drain(timeout); });
  }
  for (std::thread& t : drains) {
    t.join();
  }
}

int EmbeddedCluster::pool_workers(const std::string& stage) const {
  return impl_->PoolWorkers(stage);
}

std::vector<PoolRecommendation> EmbeddedCluster::recommendations() const {
  return impl_->orchestrator->Recommendations();
}

std::uint64_t EmbeddedCluster::elastic_decisions() const {
  return impl_->elastic != nullptr ? impl_->elastic->decisions() : 0;
}

}  // namespace sluice
