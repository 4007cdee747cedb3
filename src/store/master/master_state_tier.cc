// MasterState's disk tier: which unconsumed payloads to spill when memory
// runs short, loading spilled objects back for readers, and applying the
// nodes' reports. Spilling only ever moves single-replica delete-on-consume
// objects that no reader holds; their bytes are never dropped.
#include <algorithm>

#include "store/master/master_state.h"
#include "store/master/master_state_types.h"

namespace sluice::internal {

std::uint64_t MasterState::InFlightSpillBytes(const Node* on) const {
  std::uint64_t bytes = 0;
  for (const auto& [id, n] : nodes_) {
    if (on != nullptr && n.get() != on) {
      continue;
    }
    for (const auto& [cid, cmd] : n->commands) {
      bytes += cmd.kind == NodeCommand::Kind::kSpill ? cmd.size : 0;
    }
  }
  return bytes;
}

void MasterState::ScheduleSpills(std::uint64_t need, const Node* on) {
  auto [used_bytes, cap_bytes] = MemoryUsage();
  if (on != nullptr) {
    used_bytes = on->UsedBytes();
    cap_bytes = on->CapacityBytes();
  }
  const auto used = static_cast<double>(used_bytes);
  const auto cap = static_cast<double>(cap_bytes);
  if (cap == 0 || (need == 0 && used <= options_.high_watermark * cap)) {
    return;
  }
  // Down to the low watermark, and at least `need` bytes free.
  const double target = std::min(options_.low_watermark * cap, cap - static_cast<double>(need));
  double projected = used - static_cast<double>(InFlightSpillBytes(on));
  for (Object* o : lru_consume_) {
    if (projected <= target) {
      break;
    }
    if (!o->complete || o->removed || o->tier != Object::Tier::kMemory || o->cmd_id != 0 ||
        !o->leases.empty() || o->replicas.size() != 1) {
      continue;
    }
    const Object::Placement& p = o->replicas.front();
    if (!p.node->disk.has_value() || (on != nullptr && p.node != on)) {
      continue;
    }
    Result<std::uint64_t> off = p.node->disk->Allocate(o->size);
    if (!off.ok()) {
      continue;
    }
    o->disk_offset = *off;
    o->tier = Object::Tier::kSpilling;
    o->cmd_id = next_id_++;
    p.node->commands[o->cmd_id] = NodeCommand{o->cmd_id, NodeCommand::Kind::kSpill,
                                              o->key,    p.node->segs[p.seg].region_key,
                                              p.offset,  o->disk_offset,
                                              o->size};
    projected -= static_cast<double>(o->size);
  }
}

Status MasterState::StartLoad(Object* o) {
  if (o->load_failures >= 3) {
    return Status(StatusCode::kDataLoss,
                  "the disk copy of '" + o->key + "' could not be read back (3 attempts)");
  }
  Node* n = o->replicas.front().node;
  while (true) {
    for (std::size_t s = 0; s < n->segs.size(); ++s) {
      Result<std::uint64_t> off = n->segs[s].alloc.Allocate(o->size);
      if (off.ok()) {
        o->load_seg = s;
        o->load_offset = *off;
        o->tier = Object::Tier::kLoading;
        o->cmd_id = next_id_++;
        n->commands[o->cmd_id] =
            NodeCommand{o->cmd_id,      NodeCommand::Kind::kLoad, o->key, n->segs[s].region_key,
                        o->load_offset, o->disk_offset,           o->size};
        return Status::Ok();
      }
    }
    if (!EvictOne(o)) {
      // Make room by spilling other payloads; the reader waits (parked) and
      // asks again. With nothing to spill, the store is truly full.
      // On this node: the load needs room here.
      ScheduleSpills(o->size, n);
      if (InFlightSpillBytes(n) > 0) {
        return Status::Ok();
      }
      return ResourceExhaustedError("no memory to load spilled object '" + o->key +
                                    "' back; retry after payloads are consumed");
    }
  }
}

void MasterState::CommandDone(Node* node, const CommandResult& r) {
  auto cit = node->commands.find(r.id);
  if (cit == node->commands.end()) {
    return;  // Already applied (a repeated report).
  }
  const NodeCommand cmd = cit->second;
  node->commands.erase(cit);
  auto oit = objects_.find(cmd.key);
  if (oit == objects_.end() || oit->second->cmd_id != r.id) {
    return;
  }
  Object* o = oit->second.get();
  Object::Placement& p = o->replicas.front();
  o->cmd_id = 0;
  if (cmd.kind == NodeCommand::Kind::kSpill) {
    if (r.ok) {
      o->tier = Object::Tier::kDisk;
      ++counters_.spills;
      if (o->leases.empty()) {
        p.node->segs[p.seg].alloc.Free(p.offset, o->size);
      } else {
        o->mem_held = true;  // Freed when the last reader ends.
      }
      LogDelta(o, true);
    } else {
      p.node->disk->Free(o->disk_offset, o->size);
      o->tier = Object::Tier::kMemory;
    }
  } else {
    if (r.ok) {
      p.node->disk->Free(o->disk_offset, o->size);
      p.seg = o->load_seg;
      p.offset = o->load_offset;
      o->tier = Object::Tier::kMemory;
      o->load_failures = 0;
      ++counters_.loads;
      LogDelta(o, true);
    } else {
      p.node->segs[o->load_seg].alloc.Free(o->load_offset, o->size);
      o->tier = Object::Tier::kDisk;
      ++o->load_failures;
    }
    loaded_.push_back(o->key);
  }
  if (o->removed && o->leases.empty()) {
    Erase(o, std::nullopt);
  }
}

void MasterState::FreeTiers(Object* o) {
  for (const Object::Placement& p : o->replicas) {
    const bool in_memory =
        o->tier == Object::Tier::kMemory || o->tier == Object::Tier::kSpilling || o->mem_held;
    if (in_memory) {
      p.node->segs[p.seg].alloc.Free(p.offset, o->size);
    }
    if (o->tier == Object::Tier::kLoading) {
      p.node->segs[o->load_seg].alloc.Free(o->load_offset, o->size);
    }
    if (o->tier != Object::Tier::kMemory && p.node->disk.has_value()) {
      p.node->disk->Free(o->disk_offset, o->size);
    }
  }
}

std::vector<std::string> MasterState::TakeLoaded() {
  return std::exchange(loaded_, {});
}

}  // namespace sluice::internal
