// The embedded deployment's parts (embedded.cc) and its elastic pools
// (elastic.cc): internal to the serve layer.
#ifndef SLUICE_SERVE_EMBEDDED_IMPL_H_
#define SLUICE_SERVE_EMBEDDED_IMPL_H_

#include <list>
#include <memory>
#include <string>
#include <vector>

#include "sluice/cache/cache.h"
#include "sluice/connector/connector.h"
#include "sluice/orchestrator/server.h"
#include "sluice/runtime/stage_worker.h"
#include "sluice/serve/embedded.h"
#include "sluice/store/client.h"
#include "sluice/store/master.h"
#include "sluice/store/store_node.h"
#include "sluice/transfer/engine.h"

#include "common/mutex.h"
#include "orchestrator/core/model.h"

namespace sluice::internal {

class ElasticPools;

// One worker with what it owns: its connector (engine + store client), a
// store client for checkpoints, and its stage registrations (one, or two
// for an edge worker, three with light stages on denoise workers;
// destroyed first).
struct EmbeddedWorker {
  std::vector<std::string> stages;  // As given to AddWorker.
  bool draining = false;            // Elastic: on its way out.
  std::unique_ptr<DiffusionConnector> connector;
  std::unique_ptr<StoreClient> checkpoints;  // Checkpoints, cached conditions.
  std::unique_ptr<cache::Cache> conditions;  // Encode workers with the condition cache.
  std::unique_ptr<cache::Cache> features;    // Denoise workers sharing CFG branch keys.
  std::vector<std::unique_ptr<StageWorker>> registrations;

  // Whether it is a worker of `stage`'s pool alone (colocated workers:
  // of the admission stage's pool).
  bool Serves(const std::string& stage) const {
    return stages == std::vector<std::string>{stage} ||
           (stage == orchestrator::StandardRoles().loop &&
            stages == std::vector<std::string>{"colocated"});
  }
};

class EmbeddedClusterImpl {
 public:
  EmbeddedClusterImpl();
  ~EmbeddedClusterImpl();

  EmbeddedConfig config;
  // A token made for this process alone: its inner ports (master, fast
  // lane, store node, orchestrator, workers' engines) refuse every other
  // process, though they listen on loopback.
  SecurityConfig security;
  std::unique_ptr<MasterServer> master;
  std::unique_ptr<TransferEngine> node_engine;
  std::unique_ptr<StoreNode> node;
  std::unique_ptr<OrchestratorServer> orchestrator;
  int decode_capacity = 1;  // Of each decode registration.

  Mutex workers_mu;
  // Stable addresses: the elastic loop drains one while others come.
  std::list<EmbeddedWorker> workers SLUICE_GUARDED_BY(workers_mu);
  int next_worker SLUICE_GUARDED_BY(workers_mu) = 0;
  std::unique_ptr<ElasticPools> elastic;

  // A worker serving `stages` ("colocated": every stage of a job in one
  // assignment, in the denoise pool); decode registrations take
  // `decode_capacity` assignments at once. Built outside the lock; added
  // once registered.
  Status AddWorker(const std::vector<std::string>& stages);
  // Workers serving exactly {stage} (or, colocated, the denoise pool), not
  // draining.
  int PoolWorkers(const std::string& stage);
};

}  // namespace sluice::internal

#endif  // SLUICE_SERVE_EMBEDDED_IMPL_H_
