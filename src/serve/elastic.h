// Elastic pools for the embedded deployment (`sluice serve --elastic`): a
// thread that samples the pools' load ten times a second (the orchestrator's
// scheduler, per stage: the busiest model pool's busy slots and every
// model's queue, as every worker serves all of
// them), runs the autoscaler (orchestrator/core/autoscaler.h) over it,
// and resizes each stage's pool to the recommendation: adding workers at
// once, and removing one by draining it first (it takes no new work and
// finishes, or hands back, what it runs), then destroying it.
#ifndef SLUICE_SERVE_ELASTIC_H_
#define SLUICE_SERVE_ELASTIC_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "sluice/orchestrator/autoscale.h"

#include "common/mutex.h"
#include "orchestrator/core/autoscaler.h"

namespace sluice::internal {

class EmbeddedClusterImpl;

class ElasticPools {
 public:
  // Starts the loop over `cluster`'s pools (which must outlive this).
  ElasticPools(EmbeddedClusterImpl* cluster, AutoscaleOptions options);
  // Stops the loop and waits for the drains in flight (their workers go).
  ~ElasticPools();

  ElasticPools(const ElasticPools&) = delete;
  ElasticPools& operator=(const ElasticPools&) = delete;

  // Decisions made and applied so far (one a second; a removal's drain
  // may still run).
  std::uint64_t decisions() const { return decisions_.load(std::memory_order_acquire); }

 private:
  void Loop();
  // One sample of the pools' load (every 100 ms); with `decide`, a
  // decision (every second), applied.
  void Step(bool decide);
  // Drains and removes one worker of `stage`'s pool, on its own thread.
  void RemoveOne(const std::string& stage);

  EmbeddedClusterImpl* cluster_;
  orchestrator::Autoscaler autoscaler_;  // Loop thread only.
  Mutex mu_;
  CondVar cv_;
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  std::vector<std::thread> drains_ SLUICE_GUARDED_BY(mu_);
  std::atomic<std::uint64_t> decisions_{0};
  std::thread loop_;
};

}  // namespace sluice::internal

#endif  // SLUICE_SERVE_ELASTIC_H_
