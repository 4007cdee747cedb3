// Cache classes: per-class byte budgets and soft pins earned by reads.
#include <algorithm>

#include "store/master/master_state.h"
#include "store/master/master_state_types.h"

namespace sluice::internal {

std::uint64_t MasterState::ClassBytes(const std::string& cache_class) const {
  std::uint64_t bytes = 0;
  for (const std::list<Object*>* lru : {&lru_cache_, &lru_soft_pin_}) {
    for (const Object* o : *lru) {
      if (!o->removed && o->policy.cache_class == cache_class) {
        bytes += o->size * o->replicas.size();
      }
    }
  }
  return bytes;
}

void MasterState::EnforceClassBudget(const Object* just) {
  const std::string& c = just->policy.cache_class;
  auto budget = options_.cache_budgets.find(c);
  if (c.empty() || budget == options_.cache_budgets.end()) {
    return;
  }
  const auto limit =
      static_cast<std::uint64_t>(budget->second * static_cast<double>(MemoryUsage().second));
  std::uint64_t bytes = ClassBytes(c);
  std::vector<Object*> victims;
  for (std::list<Object*>* lru : {&lru_cache_, &lru_soft_pin_}) {
    for (Object* o : *lru) {
      if (bytes <= limit) {
        break;
      }
      if (o != just && !o->removed && o->leases.empty() && o->policy.cache_class == c) {
        bytes -= o->size * o->replicas.size();
        victims.push_back(o);
      }
    }
  }
  for (Object* o : victims) {
    ++counters_.evictions;
    ++counters_.cache_classes[c].evictions;
    Erase(o, ObjectEventKind::kEvicted);
  }
}

void MasterState::MaybeSoftPin(Object* obj) {
  if (options_.soft_pin_reads == 0 || obj->policy.kind != LeaseKind::kCache || !obj->complete ||
      obj->removed || obj->reads_done < options_.soft_pin_reads || obj->lru != &lru_cache_) {
    return;
  }
  lru_cache_.erase(obj->lru_it);
  obj->policy.kind = LeaseKind::kSoftPin;
  obj->lru = &lru_soft_pin_;
  obj->lru_it = lru_soft_pin_.insert(lru_soft_pin_.end(), obj);
  ++counters_.soft_pins;
}

}  // namespace sluice::internal
