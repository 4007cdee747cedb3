#include "store/master/master_state.h"

#include <algorithm>
#include <deque>
#include <set>

#include "store/master/master_state_types.h"

namespace sluice::internal {

namespace {

std::string HostOf(const std::string& endpoint) {
  const std::size_t colon = endpoint.rfind(':');
  return colon == std::string::npos ? endpoint : endpoint.substr(0, colon);
}

}  // namespace

MasterState::MasterState(MasterOptions options) : options_(options) {}
MasterState::~MasterState() = default;

void MasterState::Emit(ObjectEventKind kind, const std::string& key) {
  events_.push_back(ObjectEvent{kind, key});
}

std::vector<ObjectEvent> MasterState::TakeEvents() {
  return std::exchange(events_, {});
}

Status MasterState::RegisterNode(const std::string& node_id, const std::string& endpoint,
                                 const NodeResources& resources,
                                 const std::vector<ObjectRecord>& objects, TimePoint now,
                                 std::size_t* skipped) {
  const std::vector<SegmentDesc>& segments = resources.segments;
  std::size_t skipped_count = 0;
  if (node_id.empty() || node_id.size() > 256 || endpoint.empty()) {
    return InvalidArgumentError("RegisterNode: node id (1..256 bytes) and endpoint are required");
  }
  if (segments.empty()) {
    return InvalidArgumentError("RegisterNode: a node must contribute at least one segment");
  }
  std::set<std::uint64_t> keys;
  for (const SegmentDesc& s : segments) {
    if (s.size < options_.min_segment_bytes) {
      return InvalidArgumentError("RegisterNode: segment of " + std::to_string(s.size) +
                                  " bytes is below the " +
                                  std::to_string(options_.min_segment_bytes) + "-byte minimum");
    }
    if (!keys.insert(s.region_key).second) {
      return InvalidArgumentError("RegisterNode: two segments share region key " +
                                  std::to_string(s.region_key) + " (overlapping segments)");
    }
  }
  std::vector<ObjectRecord> accepted;
  const std::vector<ObjectRecord>* restore = &objects;
  auto it = nodes_.find(node_id);
  if (it != nodes_.end()) {
    Node& n = *it->second;
    bool same = n.endpoint == endpoint && n.segs.size() == segments.size() &&
                (n.disk.has_value() ? n.disk->capacity() : 0) ==
                    resources.disk_bytes / SegmentAllocator::kAlign * SegmentAllocator::kAlign;
    for (std::size_t i = 0; same && i < segments.size(); ++i) {
      same = n.segs[i].region_key == segments[i].region_key &&
             n.segs[i].alloc.capacity() ==
                 segments[i].size / SegmentAllocator::kAlign * SegmentAllocator::kAlign;
    }
    if (same) {
      n.last_seen = now;
      return Status::Ok();
    }
    // Restarted with new memory: its memory objects are gone. Those on its
    // disk tier survive where the node lists them as this master has them
    // (not since loaded back, moved or removed); they are not reported lost.
    std::set<std::string> kept;
    for (const ObjectRecord& rec : objects) {
      if (rec.on_disk && OnDiskAt(n, rec)) {
        kept.insert(rec.key);
        accepted.push_back(rec);
      }
    }
    skipped_count += objects.size() - accepted.size();
    DropNode(node_id, true, &kept);
    restore = &accepted;
  } else if (departed_.contains(node_id)) {
    // This master dropped the node and reported its objects lost: whatever
    // it still lists is stale.
    skipped_count += objects.size();
    restore = &accepted;
  }
  auto node = std::make_unique<Node>();
  node->id = node_id;
  node->epoch = next_node_epoch_++;
  node->endpoint = endpoint;
  node->last_seen = now;
  for (const SegmentDesc& s : segments) {
    node->segs.push_back(Node::Seg{s.region_key, SegmentAllocator(s.size)});
  }
  if (resources.disk_bytes >= options_.min_segment_bytes) {
    node->disk.emplace(resources.disk_bytes);
  }
  Node* n = node.get();
  nodes_[node_id] = std::move(node);
  for (const ObjectRecord& rec : *restore) {
    if (!Restore(n, rec, now)) {
      ++skipped_count;
    }
  }
  if (skipped != nullptr) {
    *skipped = skipped_count;
  }
  return Status::Ok();
}

bool MasterState::Restore(Node* node, const ObjectRecord& rec, TimePoint now) {
  if (!CheckKey(rec.key).ok() || rec.size == 0) {
    return false;
  }
  std::size_t seg = node->segs.size();
  for (std::size_t i = 0; i < node->segs.size(); ++i) {
    if (node->segs[i].region_key == rec.region_key) {
      seg = i;
    }
  }
  if (seg == node->segs.size()) {
    if (!rec.on_disk) {
      return false;
    }
    seg = 0;  // On disk (kept across a node restart): a load allocates memory.
  }
  auto it = objects_.find(rec.key);
  if (it != objects_.end() && (!it->second->complete || it->second->size != rec.size)) {
    return false;
  }
  if (rec.on_disk) {
    if (!node->disk.has_value() || it != objects_.end() ||
        !node->disk->AllocateAt(rec.disk_offset, rec.size).ok()) {
      return false;
    }
  } else if (!node->segs[seg].alloc.AllocateAt(rec.offset, rec.size).ok()) {
    return false;
  }
  if (it == objects_.end()) {
    auto obj = std::make_unique<Object>();
    obj->key = rec.key;
    obj->size = rec.size;
    obj->tensor = rec.tensor;
    obj->policy = rec.policy;
    obj->complete = true;
    obj->put_id = next_id_++;
    obj->reads_done = rec.reads_done;
    if (obj->policy.kind == LeaseKind::kTtl) {
      // The time left as the node last heard it (its clock kept running
      // while the master was down), else a full ttl.
      obj->expires_at = rec.expires_at.value_or(now + obj->policy.ttl);
    }
    obj->lru = obj->policy.kind == LeaseKind::kCache             ? &lru_cache_
               : obj->policy.kind == LeaseKind::kSoftPin         ? &lru_soft_pin_
               : obj->policy.kind == LeaseKind::kDeleteOnConsume ? &lru_consume_
                                                                 : nullptr;
    if (obj->lru != nullptr) {
      obj->lru_it = obj->lru->insert(obj->lru->end(), obj.get());
    }
    if (rec.on_disk) {
      obj->tier = Object::Tier::kDisk;
      obj->disk_offset = rec.disk_offset;
    }
    it = objects_.emplace(rec.key, std::move(obj)).first;
  }
  it->second->replicas.push_back(Object::Placement{node, seg, rec.offset});
  return true;
}

HeartbeatReply MasterState::Heartbeat(const std::string& node_id, std::uint64_t acked_seq,
                                      const std::vector<CommandResult>& done, TimePoint now) {
  HeartbeatReply reply;
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) {
    reply.reregister = true;
    return reply;
  }
  Node& n = *it->second;
  n.last_seen = now;
  for (const CommandResult& r : done) {
    CommandDone(&n, r);
  }
  for (const auto& [id, cmd] : n.commands) {
    reply.commands.push_back(cmd);
  }
  n.acked_seq = std::max(n.acked_seq, acked_seq);
  while (!n.log.empty() && n.log.front().seq <= acked_seq) {
    n.log.pop_front();
  }
  for (std::size_t i = 0; i < n.log.size() && i < 4096; ++i) {
    reply.deltas.push_back(n.log[i]);
  }
  return reply;
}

bool MasterState::HasNews(const std::string& node_id, std::uint64_t acked_seq) const {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) {
    return true;  // Lost meanwhile: the answer tells it to register again.
  }
  const Node& n = *it->second;
  return !n.commands.empty() || (!n.log.empty() && n.log.back().seq > acked_seq);
}

std::vector<MasterState::CommitMark> MasterState::CommitMarks(const std::string& key) const {
  std::vector<CommitMark> marks;
  auto it = objects_.find(key);
  if (it == objects_.end()) {
    return marks;
  }
  for (const auto& p : it->second->replicas) {
    marks.push_back({p.node->id, p.node->epoch, p.node->next_seq - 1});
  }
  return marks;
}

bool MasterState::Acknowledged(const CommitMark& m) const {
  auto it = nodes_.find(m.node_id);
  return it == nodes_.end() || it->second->epoch != m.epoch || it->second->acked_seq >= m.seq;
}

void MasterState::LogDelta(Object* obj, bool added) {
  for (const auto& p : obj->replicas) {
    NodeDelta d;
    d.seq = p.node->next_seq++;
    d.added = added;
    d.record.key = obj->key;
    if (added) {
      const bool on_disk = obj->tier == Object::Tier::kDisk;
      d.record = ObjectRecord{obj->key,        p.node->segs[p.seg].region_key,
                              p.offset,        obj->size,
                              obj->tensor,     obj->policy,
                              on_disk,         obj->disk_offset,
                              obj->reads_done, obj->expires_at};
    }
    p.node->log.push_back(std::move(d));
  }
}

Status MasterState::CheckKey(const std::string& key) const {
  if (key.empty()) {
    return InvalidArgumentError("empty key");
  }
  if (key.size() > options_.max_key_bytes) {
    return InvalidArgumentError("key of " + std::to_string(key.size()) + " bytes exceeds the " +
                                std::to_string(options_.max_key_bytes) + "-byte limit");
  }
  return Status::Ok();
}

bool MasterState::TryPlace(Object& obj, const PutRequest& req, bool skip_unreachable) {
  std::vector<Node*> order;
  for (auto& [id, n] : nodes_) {
    if (!skip_unreachable || std::find(req.unreachable.begin(), req.unreachable.end(),
                                       n->endpoint) == req.unreachable.end()) {
      order.push_back(n.get());
    }
  }
  const std::string writer_host = HostOf(req.client_endpoint);
  std::stable_sort(order.begin(), order.end(), [&](const Node* a, const Node* b) {
    const bool pa = !req.preferred_node.empty() &&
                    (a->id == req.preferred_node || a->endpoint == req.preferred_node);
    const bool pb = !req.preferred_node.empty() &&
                    (b->id == req.preferred_node || b->endpoint == req.preferred_node);
    if (pa != pb) {
      return pa;
    }
    const bool la = !writer_host.empty() && HostOf(a->endpoint) == writer_host;
    const bool lb = !writer_host.empty() && HostOf(b->endpoint) == writer_host;
    if (la != lb) {
      return la;
    }
    return a->FreeBytes() > b->FreeBytes();
  });
  for (Node* n : order) {
    if (obj.replicas.size() == req.replica_num) {
      break;
    }
    for (std::size_t s = 0; s < n->segs.size(); ++s) {
      Result<std::uint64_t> off = n->segs[s].alloc.Allocate(req.size);
      if (off.ok()) {
        obj.replicas.push_back(Object::Placement{n, s, *off});
        break;
      }
    }
  }
  if (obj.replicas.size() == req.replica_num) {
    return true;
  }
  for (const Object::Placement& p : obj.replicas) {
    p.node->segs[p.seg].alloc.Free(p.offset, obj.size);
  }
  obj.replicas.clear();
  return false;
}

Status MasterState::Allocate(Object& obj, const PutRequest& req, TimePoint now) {
  if (!req.unreachable.empty() && TryPlace(obj, req, /*skip_unreachable=*/true)) {
    return Status::Ok();
  }
  while (!TryPlace(obj, req, /*skip_unreachable=*/false)) {
    if (!ReclaimReservations(now) && !EvictOne(&obj)) {
      ScheduleSpills(req.size * req.replica_num);
      // The free space may be spread over nodes none of which holds the
      // object alone: then make room on one node.
      for (auto it = nodes_.begin(); it != nodes_.end() && InFlightSpillBytes() == 0; ++it) {
        ScheduleSpills(req.size, it->second.get());
      }
      if (InFlightSpillBytes() > 0) {
        return ResourceExhaustedError("store memory is full; " +
                                      std::to_string(InFlightSpillBytes()) +
                                      " bytes are being spilled to disk: retry shortly");
      }
      return ResourceExhaustedError("store is full: no room for " + std::to_string(req.size) +
                                    " bytes x " + std::to_string(req.replica_num) +
                                    " replica(s) even after eviction; retry after objects are "
                                    "consumed or removed");
    }
  }
  return Status::Ok();
}

Status MasterState::CheckPut(const PutRequest& req) const {
  SLUICE_RETURN_IF_ERROR(CheckKey(req.key));
  if (req.size == 0) {
    return InvalidArgumentError("PutStart: size must be > 0");
  }
  if (req.policy.kind == LeaseKind::kDeleteOnConsume && req.policy.consume_count == 0) {
    return InvalidArgumentError("PutStart: delete_on_consume needs consume_count >= 1");
  }
  if (req.policy.kind == LeaseKind::kTtl && req.policy.ttl.count() <= 0) {
    return InvalidArgumentError("PutStart: ttl policy needs ttl > 0");
  }
  if (const std::string& c = req.policy.cache_class; !c.empty()) {
    const bool cache =
        req.policy.kind == LeaseKind::kCache || req.policy.kind == LeaseKind::kSoftPin;
    if (!cache || !IsCacheClassName(c)) {
      return InvalidArgumentError(
          "PutStart: cache_class must be 1..32 of [a-z0-9_], on cache and soft_pin objects only");
    }
  }
  return Status::Ok();
}

PutGrant MasterState::GrantOf(const Object& o) const {
  PutGrant g{o.put_id, {}};
  for (const auto& p : o.replicas) {
    g.replicas.push_back({p.node->id, p.node->endpoint, p.node->segs[p.seg].region_key, p.offset});
  }
  return g;
}

Status MasterState::CheckPlacement(const PutRequest& req) const {
  if (nodes_.empty()) {
    // Right after a master restart nodes are re-registering: the caller
    // retries (a store with no node at all is a deployment error it reports
    // once its retry deadline passes).
    return UnavailableError("PutStart: no store node is registered yet; retry shortly",
                            FailureScope::kRequest);
  }
  std::uint64_t largest = 0;
  for (auto& [id, n] : nodes_) {
    for (auto& s : n->segs) {
      largest = std::max(largest, s.alloc.capacity());
    }
  }
  if (req.size > largest) {
    return InvalidArgumentError("PutStart: " + std::to_string(req.size) +
                                " bytes is larger than any segment (" + std::to_string(largest) +
                                " bytes)");
  }
  const std::uint32_t replicas = std::max<std::uint32_t>(1, req.replica_num);
  if (replicas > nodes_.size()) {
    // Transient after a restart (nodes re-register one by one): retryable.
    return UnavailableError("PutStart: " + std::to_string(replicas) + " replicas asked, " +
                                std::to_string(nodes_.size()) + " store node(s) registered",
                            FailureScope::kRequest);
  }
  return Status::Ok();
}

Result<PutGrant> MasterState::PutStart(const PutRequest& req, TimePoint now) {
  SLUICE_RETURN_IF_ERROR(CheckPut(req));
  auto existing = objects_.find(req.key);
  if (existing != objects_.end()) {
    Object& o = *existing->second;
    if (!o.complete && !req.request_id.empty() && o.request_id == req.request_id) {
      return GrantOf(o);
    }
    return AlreadyExistsError("key '" + req.key + "' " +
                              (o.complete ? "is already committed" : "is being written"));
  }
  SLUICE_RETURN_IF_ERROR(CheckPlacement(req));
  PutRequest r = req;
  r.replica_num = std::max<std::uint32_t>(1, req.replica_num);
  auto obj = std::make_unique<Object>();
  obj->key = req.key;
  obj->size = req.size;
  obj->tensor = req.tensor;
  obj->policy = req.policy;
  obj->request_id = req.request_id;
  obj->put_id = next_id_++;
  obj->put_deadline = now + options_.put_timeout;
  SLUICE_RETURN_IF_ERROR(Allocate(*obj, r, now));
  PutGrant g = GrantOf(*obj);
  objects_[req.key] = std::move(obj);
  EvictToLowWatermark();
  ScheduleSpills();
  return g;
}

Status MasterState::PutEnd(const std::string& key, std::uint64_t put_id, TimePoint now) {
  auto it = objects_.find(key);
  if (it == objects_.end() || it->second->put_id != put_id) {
    return NotFoundError("no open put " + std::to_string(put_id) + " for key '" + key +
                         "' (revoked, timed out, or its node was lost)");
  }
  Object& o = *it->second;
  if (o.complete) {
    return Status::Ok();  // A retry of a PutEnd that succeeded.
  }
  Commit(o, now);
  return Status::Ok();
}

void MasterState::Commit(Object& o, TimePoint now) {
  o.complete = true;
  if (o.policy.kind == LeaseKind::kTtl) {
    o.expires_at = now + o.policy.ttl;
  }
  LogDelta(&o, true);
  o.lru = o.policy.kind == LeaseKind::kCache             ? &lru_cache_
          : o.policy.kind == LeaseKind::kSoftPin         ? &lru_soft_pin_
          : o.policy.kind == LeaseKind::kDeleteOnConsume ? &lru_consume_
                                                         : nullptr;
  if (o.lru != nullptr) {
    o.lru_it = o.lru->insert(o.lru->end(), &o);
  }
  EnforceClassBudget(&o);
  ScheduleSpills();
}

Status MasterState::PutRevoke(const std::string& key, std::uint64_t put_id) {
  auto it = objects_.find(key);
  if (it == objects_.end() || it->second->put_id != put_id) {
    return NotFoundError("no open put " + std::to_string(put_id) + " for key '" + key + "'");
  }
  if (it->second->complete) {
    return FailedPreconditionError("put of '" + key + "' is already committed; use Remove");
  }
  Erase(it->second.get(), std::nullopt);
  return Status::Ok();
}

Result<ReadGrant> MasterState::GetStart(const std::string& key, const std::string& client_endpoint,
                                        TimePoint now) {
  SLUICE_RETURN_IF_ERROR(CheckKey(key));
  Object* found = FindVisible(key);
  if (found == nullptr) {
    return NotFoundError("no object '" + key + "'");
  }
  Object& o = *found;
  if (!o.complete) {
    return FailedPreconditionError("object '" + key + "' is still being written; WaitFor it first");
  }
  if (o.tier == Object::Tier::kDisk || o.tier == Object::Tier::kLoading) {
    if (o.tier == Object::Tier::kDisk) {
      SLUICE_RETURN_IF_ERROR(StartLoad(&o));
    }
    ReadGrant parked;
    parked.loading = true;
    return parked;
  }
  const std::uint64_t lease = next_id_++;
  o.leases[lease] = now + options_.read_lease_timeout;
  Touch(&o);
  ReadGrant g;
  g.lease_id = lease;
  g.meta = ObjectMeta{o.size, o.tensor};
  const std::string host = HostOf(client_endpoint);
  for (const auto& p : o.replicas) {
    g.replicas.push_back({p.node->id, p.node->endpoint, p.node->segs[p.seg].region_key, p.offset});
  }
  std::stable_partition(g.replicas.begin(), g.replicas.end(), [&](const ReplicaLocation& r) {
    return !host.empty() && HostOf(r.endpoint) == host;
  });
  return g;
}

Status MasterState::GetEnd(const std::string& key, std::uint64_t lease_id, bool completed) {
  auto it = objects_.find(key);
  if (it == objects_.end() || it->second->leases.erase(lease_id) == 0) {
    return NotFoundError("no read lease " + std::to_string(lease_id) + " on '" + key +
                         "' (already ended or expired)");
  }
  Object& o = *it->second;
  if (completed) {
    ++o.reads_done;
    MaybeSoftPin(&o);
  }
  if (o.mem_held && o.leases.empty()) {
    const auto& p = o.replicas.front();
    p.node->segs[p.seg].alloc.Free(p.offset, o.size);
    o.mem_held = false;
  }
  if (o.policy.kind == LeaseKind::kDeleteOnConsume && o.reads_done >= o.policy.consume_count) {
    o.removed = true;
  } else if (completed && o.policy.kind == LeaseKind::kDeleteOnConsume && o.complete) {
    LogDelta(&o, true);  // Nodes keep the count, for a master restart.
  }
  if (o.removed && o.leases.empty()) {
    const bool consumed =
        o.policy.kind == LeaseKind::kDeleteOnConsume && o.reads_done >= o.policy.consume_count;
    Erase(&o, consumed ? std::optional(ObjectEventKind::kConsumed) : std::nullopt);
  }
  return Status::Ok();
}

Status MasterState::RenewRead(const std::string& key, std::uint64_t lease_id, TimePoint now) {
  auto it = objects_.find(key);
  auto lease = it == objects_.end() ? std::map<std::uint64_t, TimePoint>::iterator()
                                    : it->second->leases.find(lease_id);
  if (it == objects_.end() || lease == it->second->leases.end()) {
    return NotFoundError("no read lease " + std::to_string(lease_id) + " on '" + key +
                         "' (already ended or expired)");
  }
  lease->second = now + options_.read_lease_timeout;
  return Status::Ok();
}

Status MasterState::Remove(const std::string& key) {
  SLUICE_RETURN_IF_ERROR(CheckKey(key));
  Object* found = FindVisible(key);
  if (found == nullptr) {
    return NotFoundError("no object '" + key + "'");
  }
  Object& o = *found;
  if (!o.complete) {
    return FailedPreconditionError("object '" + key +
                                   "' is being written; its writer must end or revoke the put");
  }
  if (!o.leases.empty()) {
    o.removed = true;  // Readers in flight keep the bytes until they finish.
    return Status::Ok();
  }
  Erase(&o, std::nullopt);
  return Status::Ok();
}

bool MasterState::Exists(const std::string& key) const {
  auto it = objects_.find(key);
  return it != objects_.end() && it->second->complete && !it->second->removed;
}

void MasterState::Touch(Object* obj) {
  if (obj->lru != nullptr) {
    obj->lru->splice(obj->lru->end(), *obj->lru, obj->lru_it);
  }
}

bool MasterState::EvictOne(const Object* protect) {
  for (std::list<Object*>* lru : {&lru_cache_, &lru_soft_pin_}) {
    for (Object* o : *lru) {
      if (o != protect && o->leases.empty() && !o->removed) {
        ++counters_.evictions;
        Erase(o, ObjectEventKind::kEvicted);
        return true;
      }
    }
  }
  return false;
}

void MasterState::EvictToLowWatermark(const Object* protect) {
  // Reserved space does not count: a reservation's put evicts for itself
  // when it commits, and one never used must not cost another object.
  auto [used, cap] = MemoryUsage();
  used -= reserved_bytes_;
  if (cap == 0 || static_cast<double>(used) <= options_.high_watermark * static_cast<double>(cap)) {
    return;
  }
  while (static_cast<double>(used) > options_.low_watermark * static_cast<double>(cap) &&
         EvictOne(protect)) {
    used = MemoryUsage().first - reserved_bytes_;
  }
}

std::uint64_t MasterState::EvictableBytes(std::uint64_t enough) const {
  std::uint64_t bytes = 0;
  for (const std::list<Object*>* lru : {&lru_cache_, &lru_soft_pin_}) {
    for (const Object* o : *lru) {
      if (bytes >= enough) {
        return bytes;
      }
      if (o->leases.empty() && !o->removed) {
        bytes += o->size * o->replicas.size();
      }
    }
  }
  return bytes;
}

std::pair<std::uint64_t, std::uint64_t> MasterState::MemoryUsage() const {
  std::uint64_t used = 0, cap = 0;
  for (const auto& [id, n] : nodes_) {
    for (const auto& seg : n->segs) {
      cap += seg.alloc.capacity();
      used += seg.alloc.used();
    }
  }
  return {used, cap};
}

MasterState::Object* MasterState::FindVisible(const std::string& key) {
  auto it = objects_.find(key);
  return it == objects_.end() || it->second->removed ? nullptr : it->second.get();
}

void MasterState::Erase(Object* obj, std::optional<ObjectEventKind> event) {
  if (event.has_value()) {
    Emit(*event, obj->key);
  }
  if (obj->cmd_id != 0) {
    // A node is copying this object's bytes: free nothing until it reports.
    obj->removed = true;
    return;
  }
  if (obj->complete) {
    LogDelta(obj, false);
  }
  FreeTiers(obj);
  if (obj->lru != nullptr) {
    obj->lru->erase(obj->lru_it);
  }
  objects_.erase(obj->key);
}

bool MasterState::OnDiskAt(const Node& node, const ObjectRecord& rec) const {
  auto it = objects_.find(rec.key);
  if (it == objects_.end()) {
    return false;
  }
  const Object& o = *it->second;
  // Being loaded back counts: the disk copy stays whole until the load
  // lands, and the memory it was loading into went with the old node.
  const bool disk_copy = o.tier == Object::Tier::kDisk || o.tier == Object::Tier::kLoading;
  return o.complete && !o.removed && disk_copy && o.disk_offset == rec.disk_offset &&
         o.size == rec.size &&
         std::any_of(o.replicas.begin(), o.replicas.end(),
                     [&](const Object::Placement& p) { return p.node == &node; });
}

void MasterState::DropNode(const std::string& node_id, bool lost,
                           const std::set<std::string>* kept) {
  auto nit = nodes_.find(node_id);
  if (nit == nodes_.end()) {
    return;
  }
  if (departed_.insert(node_id).second) {
    departed_order_.push_back(node_id);
    if (departed_order_.size() > kMaxDeparted) {
      departed_.erase(departed_order_.front());
      departed_order_.pop_front();
    }
  }
  Node* node = nit->second.get();
  std::vector<Object*> orphans;
  for (auto& [key, o] : objects_) {
    if (o->cmd_id != 0 && node->commands.count(o->cmd_id) != 0) {
      o->cmd_id = 0;  // The node is gone, and with it the copy in flight.
    }
    auto& reps = o->replicas;
    reps.erase(std::remove_if(reps.begin(), reps.end(),
                              [node](const Object::Placement& p) { return p.node == node; }),
               reps.end());
    if (reps.empty()) {
      orphans.push_back(o.get());
    }
  }
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    const auto& reps = it->second->replicas;
    const bool on_node = std::any_of(reps.begin(), reps.end(),
                                     [node](const Object::Placement& p) { return p.node == node; });
    if (on_node) {
      FreeReservation(it++);  // The node's allocator goes with it below.
    } else {
      ++it;
    }
  }
  for (Object* o : orphans) {
    const bool report =
        lost && o->complete && !o->removed && (kept == nullptr || !kept->contains(o->key));
    counters_.objects_lost += report ? 1 : 0;
    Erase(o, report ? std::optional(ObjectEventKind::kLost) : std::nullopt);
  }
  nodes_.erase(nit);
}

void MasterState::Tick(TimePoint now) {
  std::vector<std::string> dead;
  for (auto& [id, n] : nodes_) {
    if (now - n->last_seen > options_.node_timeout) {
      dead.push_back(id);
    }
  }
  for (const std::string& id : dead) {
    DropNode(id, true);
  }
  std::vector<Object*> erase;
  for (auto& [key, o] : objects_) {
    if (!o->complete) {
      if (now > o->put_deadline) {
        ++counters_.lease_expiries;
        erase.push_back(o.get());
      }
      continue;
    }
    for (auto l = o->leases.begin(); l != o->leases.end();) {
      if (now > l->second) {
        ++counters_.lease_expiries;
        l = o->leases.erase(l);
      } else {
        ++l;
      }
    }
    if (o->expires_at.has_value() && now > *o->expires_at && !o->removed) {
      o->removed = true;
      Emit(ObjectEventKind::kExpired, o->key);
    }
    if (o->removed && o->leases.empty()) {
      erase.push_back(o.get());
    }
  }
  for (Object* o : erase) {
    Erase(o, std::nullopt);
  }
  ExpireReservations(now);
  ScheduleSpills();
}

std::vector<std::string> MasterState::NodeEndpoints() const {
  std::vector<std::string> out;
  for (const auto& [id, n] : nodes_) {
    out.push_back(n->endpoint);
  }
  std::sort(out.begin(), out.end());
  return out;
}

MasterStats MasterState::Stats() const {
  std::uint64_t largest_free = 0;
  MasterStats s = counters_;
  s.nodes = nodes_.size();
  s.reservations = reservations_.size();
  for (const auto& [key, o] : objects_) {
    (o->complete ? s.objects : s.objects_writing) += 1;
    const bool evictable =
        o->policy.kind == LeaseKind::kCache || o->policy.kind == LeaseKind::kSoftPin;
    s.objects_cached += o->complete && evictable ? 1 : 0;
    if (o->complete && !o->removed && evictable && !o->policy.cache_class.empty()) {
      CacheClassStats& c = s.cache_classes[o->policy.cache_class];
      ++c.objects;
      c.bytes += o->size * o->replicas.size();
    }
  }
  for (const auto& [id, n] : nodes_) {
    for (const auto& seg : n->segs) {
      s.capacity_bytes += seg.alloc.capacity();
      s.used_bytes += seg.alloc.used();
      const AllocatorStats a = seg.alloc.Stats();
      s.free_extents += a.free_extents;
      largest_free += a.largest_free;
    }
    s.unacked_changes += n->log.size();
    if (n->disk.has_value()) {
      s.disk_capacity_bytes += n->disk->capacity();
      s.disk_used_bytes += n->disk->used();
    }
  }
  const std::uint64_t free_bytes = s.capacity_bytes - s.used_bytes;
  s.fragmentation = free_bytes == 0
                        ? 0
                        : 1.0 - static_cast<double>(largest_free) / static_cast<double>(free_bytes);
  for (const auto& [c, fraction] : options_.cache_budgets) {
    s.cache_classes[c].budget_bytes =
        static_cast<std::uint64_t>(fraction * static_cast<double>(s.capacity_bytes));
  }
  return s;
}

}  // namespace sluice::internal
