#include "serve/elastic.h"

#include <algorithm>
#include <map>

#include "common/log.h"
#include "serve/embedded_impl.h"

namespace sluice::internal {

ElasticPools::ElasticPools(EmbeddedClusterImpl* cluster, AutoscaleOptions options)
    : cluster_(cluster), autoscaler_(options) {
  loop_ = std::thread([this] { Loop(); });
}

ElasticPools::~ElasticPools() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  loop_.join();
  std::vector<std::thread> drains;
  {
    MutexLock lock(mu_);
    drains.swap(drains_);
  }
  for (std::thread& t : drains) {
    t.join();
  }
}

void ElasticPools::Loop() {
  MutexLock lock(mu_);
  for (int tick = 1; !stopping_; ++tick) {
    cv_.WaitFor(lock, std::chrono::milliseconds(100));
    if (stopping_) {
      break;
    }
    lock.Unlock();
    Step(tick % 10 == 0);
    lock.Lock();
  }
}

void ElasticPools::Step(bool decide) {
  const bool colocated = cluster_->config.colocated;
  const orchestrator::PipelineRoles& roles = orchestrator::StandardRoles();
  // Per stage: every worker serves every model, so each model's pool of a
  // stage sees the same workers and their slots busy (the most any shows),
  // and its own queue (summed). Workers and slots as this deployment has
  // them.
  std::map<std::string, PoolLoad> stages;
  for (const PoolLoad& l : cluster_->orchestrator->PoolLoads()) {
    PoolLoad& s = stages[l.stage];
    s.stage = l.stage;
    s.busy_slots = std::max(s.busy_slots, l.busy_slots);
    s.queued += l.queued;
  }
  std::vector<PoolLoad> loads;
  for (auto& [stage, l] : stages) {
    l.workers = cluster_->PoolWorkers(stage);
    l.slots = l.workers * (stage == roles.output ? cluster_->decode_capacity : 1);
    loads.push_back(l);
  }
  const auto now = std::chrono::steady_clock::now();
  autoscaler_.Observe(loads, now);
  if (!decide) {
    return;
  }
  for (const PoolRecommendation& r : autoscaler_.Recommend(now)) {
    // Only the pools this deployment has workers for: colocated, the
    // admission stage's pool (its jobs run nothing else); else the three
    // stages.
    const bool ours = colocated ? r.stage == roles.loop
                                : (r.stage == roles.condition || r.stage == roles.loop ||
                                   r.stage == roles.output);
    if (!ours) {
      continue;
    }
    const int have = cluster_->PoolWorkers(r.stage);
    if (r.recommended > have) {
      SLUICE_LOG(info, "elastic: {} pool {} -> {} workers (utilization {:.2f}, queued {:.1f})",
                 r.stage, have, r.recommended, r.utilization, r.queued);
      for (int i = have; i < r.recommended; ++i) {
        const std::vector<std::string> stages_of =
            colocated ? std::vector<std::string>{"colocated"} : std::vector<std::string>{r.stage};
        if (Status s = cluster_->AddWorker(stages_of); !s.ok()) {
          SLUICE_LOG(warn, "elastic: adding a {} worker: {}", r.stage, s.ToString());
          break;
        }
      }
    } else if (r.recommended < have) {
      SLUICE_LOG(info, "elastic: {} pool {} -> {} workers (utilization {:.2f}); draining one",
                 r.stage, have, have - 1, r.utilization);
      RemoveOne(r.stage);
    }
  }
  decisions_.fetch_add(1, std::memory_order_release);
}

void ElasticPools::RemoveOne(const std::string& stage) {
  EmbeddedWorker* victim = nullptr;
  {
    MutexLock lock(cluster_->workers_mu);
    // The newest of the pool goes (its caches and connections are the
    // least warm).
    for (auto it = cluster_->workers.rbegin(); it != cluster_->workers.rend(); ++it) {
      if (it->Serves(stage) && !it->draining) {
        it->draining = true;
        victim = &*it;
        break;
      }
    }
  }
  if (victim == nullptr) {
    return;
  }
  MutexLock lock(mu_);
  drains_.emplace_back([this, victim] {
    for (auto& reg : victim->registrations) {
      reg->Drain(std::chrono::seconds(60));
    }
    std::list<EmbeddedWorker> gone;
    {
      MutexLock workers(cluster_->workers_mu);
      for (auto it = cluster_->workers.begin(); it != cluster_->workers.end(); ++it) {
        if (&*it == victim) {
          gone.splice(gone.end(), cluster_->workers, it);
          break;
        }
      }
    }
    // Destroyed here, outside the lock: its registrations end, then its
    // connector.
  });
}

}  // namespace sluice::internal
