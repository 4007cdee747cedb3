#include "sluice/store/store_node.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/rpc_auth.h"
#include "common/rpc_status.h"
#include "proto/store/v1/master.grpc.pb.h"
#include "store/node/disk_tier.h"

namespace sluice::internal {

namespace pb = ::sluice::store::v1;

// After a heartbeat that carried directory changes, the next one waits this
// long, so that a stream of commits costs at most 50 heartbeats a second (a
// master crash can lose what was committed in the last ~20 ms), unless the
// master asks for the acknowledgment at once (durable commits).
constexpr std::chrono::milliseconds kMinHeartbeatGap{20};

class StoreNodeImpl {
 public:
  StoreNodeImpl(TransferEngine* engine, StoreNodeConfig config)
      : engine_(engine), config_(std::move(config)) {}

  ~StoreNodeImpl() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
      if (heartbeat_ctx_ != nullptr) {
        heartbeat_ctx_->TryCancel();  // A held heartbeat ends now.
      }
    }
    cv_.NotifyAll();
    if (thread_.joinable()) {
      thread_.join();
    }
    tier_.reset();  // Before the memory its commands copy goes.
    for (RegionKey key : keys_) {
      Status s = engine_->UnregisterMemory(key);
      if (!s.ok()) {
        SLUICE_LOG(warn, "store node {}: unregister failed: {}", config_.node_id, s.ToString());
      }
    }
  }

  Status Init() {
    SLUICE_RETURN_IF_ERROR(ParseHostPort(config_.master, false).status());
    if (config_.segments < 1 || config_.segments > 64) {
      return InvalidArgumentError("store node: segments must be in 1..64");
    }
    const std::uint64_t per = config_.memory_bytes / static_cast<std::uint64_t>(config_.segments);
    if (per < (std::uint64_t{1} << 20)) {
      return InvalidArgumentError("store node: each segment needs at least 1 MiB of memory");
    }
    if (config_.node_id.empty()) {
      config_.node_id = engine_->endpoint();
    }
    for (int i = 0; i < config_.segments; ++i) {
      SLUICE_ASSIGN_OR_RETURN(SharedBuffer buf, engine_->AllocateShared(per));
      SLUICE_ASSIGN_OR_RETURN(
          RegionKey key,
          engine_->RegisterMemory(buf.data(), per, MemoryKind::kHost, Access::kRemoteReadWrite));
      memory_.push_back(std::move(buf));
      keys_.push_back(key);
      sizes_.push_back(per);
    }
    if (config_.disk_bytes > 0) {
      SLUICE_ASSIGN_OR_RETURN(
          tier_,
          DiskTier::Open(
              config_.disk_dir, config_.disk_bytes, config_.node_id, config_.disk_bytes_per_s,
              [this](std::uint64_t key, std::uint64_t offset, std::uint64_t size) {
                return Memory(key, offset, size);
              },
              [this] {
                // Report it now rather than at the next heartbeat.
                MutexLock lock(mu_);
                result_ready_ = true;
                cv_.NotifyAll();
              }));
      // Objects the previous run left on disk: registered like a directory
      // kept across a master restart.
      const auto now = std::chrono::steady_clock::now();
      for (pb::ObjectRecord& r : tier_->TakeRecovered()) {
        DirectoryEntry& e = directory_[r.key()];
        Count(r, +1);
        if (r.ttl_left_ms() > 0) {
          e.expires = now + std::chrono::milliseconds(r.ttl_left_ms());
        }
        e.record = std::move(r);
      }
    }
    master_ = config_.master;
    stub_ = pb::Master::NewStub(MakeChannel(master_, config_.security));
    thread_ = std::thread([this] { Run(); });
    return Status::Ok();
  }

  const std::string& node_id() const { return config_.node_id; }
  bool registered() const { return registered_.load(); }

 private:
  Status Register() {
    pb::RegisterNodeRequest req;
    req.set_node_id(config_.node_id);
    req.set_endpoint(engine_->endpoint());
    for (std::size_t i = 0; i < keys_.size(); ++i) {
      pb::Segment* s = req.add_segments();
      s->set_region_key(keys_[i].value);
      s->set_size(sizes_[i]);
    }
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [key, entry] : directory_) {
      pb::ObjectRecord* r = req.add_objects();
      *r = entry.record;
      if (entry.expires.has_value()) {
        // The time left now: the TTL keeps running while the master is away.
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(*entry.expires - now);
        r->set_ttl_left_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(1, left.count())));
      }
    }
    req.set_disk_bytes(tier_ != nullptr ? tier_->bytes() : 0);
    pb::RegisterNodeResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + config_.rpc_timeout);
    Status s = FromGrpc(stub_->RegisterNode(&ctx, req, &resp), "RegisterNode");
    if (s.ok() && resp.heartbeat_interval_ms() > 0) {
      interval_ = std::chrono::milliseconds(resp.heartbeat_interval_ms());
    }
    if (s.ok()) {
      acked_seq_ = 0;  // Change numbers restart with each registration.
      if (resp.skipped_objects() > 0) {
        SLUICE_LOG(warn, "store node {}: master could not take back {} object(s)", config_.node_id,
                   resp.skipped_objects());
      }
    }
    return s;
  }

  // Asks where the master is now (config_.resolve_master); another
  // endpoint gets a new stub, and the next loop registers there.
  void Reresolve() {
    if (!config_.resolve_master) {
      return;
    }
    const std::string found = config_.resolve_master();
    if (found.empty() || found == master_ || !ParseHostPort(found, false).ok()) {
      return;
    }
    SLUICE_LOG(info, "store node {}: the master moved from {} to {}", config_.node_id, master_,
               found);
    master_ = found;
    stub_ = pb::Master::NewStub(MakeChannel(master_, config_.security));
  }

  // Registers, then heartbeats; re-registers when the master forgot us.
  void Run() {
    bool need_register = true;
    Status last_error;
    MutexLock lock(mu_);
    while (!stopping_) {
      lock.Unlock();
      Status s;
      std::chrono::milliseconds pause = interval_;  // Before the next heartbeat.
      if (need_register) {
        if (tier_ != nullptr) {
          tier_->Quiesce();  // No load still writes memory the master sees as free.
        }
        s = Register();
        need_register = !s.ok();
        if (s.ok()) {
          pause = std::chrono::milliseconds(0);  // Held heartbeats start now.
          SLUICE_LOG(info, "store node {} registered with master {}", config_.node_id, master_);
        }
      } else {
        pb::HeartbeatRequest req;
        req.set_node_id(config_.node_id);
        req.set_acked_seq(acked_seq_);
        if (tier_ != nullptr) {
          for (pb::CommandResult& r : tier_->Results()) {
            *req.add_done() = std::move(r);
          }
        }
        // The master holds the answer until it has news for this node (or
        // one interval), so directory changes arrive as they happen: the
        // next heartbeat goes out at once.
        req.set_wait_ms(static_cast<std::uint32_t>(interval_.count()));
        pb::HeartbeatResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + config_.rpc_timeout + interval_);
        {
          MutexLock guard(mu_);
          if (stopping_) {
            break;
          }
          heartbeat_ctx_ = &ctx;
        }
        const auto sent = std::chrono::steady_clock::now();
        s = FromGrpc(stub_->Heartbeat(&ctx, req, &resp), "Heartbeat");
        {
          MutexLock guard(mu_);
          heartbeat_ctx_ = nullptr;
          if (stopping_) {
            break;  // Cancelled by the destructor.
          }
        }
        need_register = !s.ok() || resp.reregister();
        if (s.ok()) {
          Apply(resp);
          // Disk-tier commands run on the tier's thread, which cuts the
          // pause short when one finishes (results go back at once). After
          // news, a short gap lets changes batch up (at most 1 /
          // kMinHeartbeatGap per second); an answer held its full wait
          // means none is needed.
          if (tier_ != nullptr) {
            tier_->ApplyDeltas(resp.deltas());
            tier_->Update(resp.commands());
          }
          if (resp.ack_now()) {
            pause = std::chrono::milliseconds(0);  // A put waits for this acknowledgment.
          } else if (resp.deltas_size() > 0) {
            pause = kMinHeartbeatGap;
          } else if (std::chrono::steady_clock::now() - sent >= interval_ / 2) {
            pause = std::chrono::milliseconds(0);
          }
        }
      }
      registered_ = !need_register;
      if (!s.ok() && s.ToString() != last_error.ToString()) {
        SLUICE_LOG(warn, "store node {}: {}", config_.node_id, s.ToString());
      }
      last_error = s;
      if (!s.ok() &&
          (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded)) {
        Reresolve();
      }
      lock.Lock();
      if (need_register) {
        pause = std::chrono::milliseconds(200);
      }
      if (pause.count() > 0) {
        cv_.WaitFor(lock, pause,
                    [this]() SLUICE_REQUIRES(mu_) { return stopping_ || result_ready_; });
      }
      result_ready_ = false;
    }
  }

  // Applies directory changes in order; a change seen twice (a lost
  // heartbeat answer) is applied again harmlessly.
  void Apply(const pb::HeartbeatResponse& resp) {
    const auto now = std::chrono::steady_clock::now();
    for (const pb::NodeDelta& d : resp.deltas()) {
      if (d.added()) {
        DirectoryEntry& e = directory_[d.record().key()];
        if (!e.record.key().empty()) {
          Count(e.record, -1);  // Replaced (moved to disk, or back).
        }
        Count(d.record(), +1);
        e.record = d.record();
        e.expires.reset();
        if (d.record().ttl_left_ms() > 0) {
          e.expires = now + std::chrono::milliseconds(d.record().ttl_left_ms());
        }
      } else if (auto it = directory_.find(d.record().key()); it != directory_.end()) {
        Count(it->second.record, -1);
        directory_.erase(it);
      }
      acked_seq_ = std::max(acked_seq_, d.seq());
    }
  }

  // Adds (`sign` +1) or takes away (-1) `r` in the held-object counts.
  void Count(const pb::ObjectRecord& r, int sign) {
    static constexpr std::string_view kPolicies[] = {"cache", "delete_on_consume", "ttl",
                                                     "soft_pin"};
    const auto kind = static_cast<std::size_t>(r.policy().kind());
    const std::string policy(kind < std::size(kPolicies) ? kPolicies[kind] : "unknown");
    MutexLock lock(metrics_mu_);
    StoreNodeMetrics::Held& h = held_[{policy, r.policy().cache_class()}];
    const auto add = [sign](std::uint64_t& v, std::uint64_t by) { v = sign > 0 ? v + by : v - by; };
    add(h.objects, 1);
    add(r.on_disk() ? h.disk_bytes : h.memory_bytes, r.size());
    if (h.objects == 0) {
      held_.erase({policy, r.policy().cache_class()});
    }
  }

 public:
  StoreNodeMetrics Metrics() const {
    StoreNodeMetrics m;
    for (std::uint64_t size : sizes_) {
      m.memory_bytes += size;
    }
    m.registered = registered_.load();
    if (tier_ != nullptr) {
      m.disk_bytes = tier_->bytes();
      const DiskTier::Counters c = tier_->counters();
      m.spills = c.spills;
      m.loads = c.loads;
      m.bytes_spilled = c.bytes_spilled;
      m.bytes_loaded = c.bytes_loaded;
      m.disk_failures = c.failed;
    }
    MutexLock lock(metrics_mu_);
    m.held = held_;
    return m;
  }

 private:
  // The node memory [offset, offset + size) of region `key`, or null.
  char* Memory(std::uint64_t key, std::uint64_t offset, std::uint64_t size) {
    for (std::size_t i = 0; i < keys_.size(); ++i) {
      if (keys_[i].value == key && offset <= sizes_[i] && size <= sizes_[i] - offset) {
        return static_cast<char*>(memory_[i].data()) + offset;
      }
    }
    return nullptr;
  }

  TransferEngine* engine_;
  StoreNodeConfig config_;
  std::unique_ptr<DiskTier> tier_;  // Null without a disk tier.
  // Objects this node holds, as the master reported them (heartbeat thread).
  struct DirectoryEntry {
    pb::ObjectRecord record;
    std::optional<std::chrono::steady_clock::time_point> expires;  // TTL objects.
  };
  std::map<std::string, DirectoryEntry> directory_;
  std::uint64_t acked_seq_ = 0;
  std::vector<SharedBuffer> memory_;
  std::vector<RegionKey> keys_;
  std::vector<std::uint64_t> sizes_;
  std::string master_;  // What stub_ dials (heartbeat thread, once started).
  std::unique_ptr<pb::Master::Stub> stub_;
  std::chrono::milliseconds interval_{500};
  std::atomic<bool> registered_{false};
  mutable Mutex metrics_mu_;  // Taken with no other lock held.
  std::map<std::pair<std::string, std::string>, StoreNodeMetrics::Held> held_
      SLUICE_GUARDED_BY(metrics_mu_);
  Mutex mu_;
  CondVar cv_;
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  bool result_ready_ SLUICE_GUARDED_BY(mu_) = false;  // A disk-tier result to report.
  grpc::ClientContext* heartbeat_ctx_ SLUICE_GUARDED_BY(mu_) = nullptr;  // The call in flight.
  std::thread thread_;
};

}  // namespace sluice::internal

namespace sluice {

StoreNode::StoreNode(std::unique_ptr<internal::StoreNodeImpl> impl) : impl_(std::move(impl)) {}
StoreNode::~StoreNode() = default;

Result<std::unique_ptr<StoreNode>> StoreNode::Start(TransferEngine* engine,
                                                    const StoreNodeConfig& config) {
  if (engine == nullptr) {
    return InvalidArgumentError("store node: engine is required");
  }
  auto impl = std::make_unique<internal::StoreNodeImpl>(engine, config);
  SLUICE_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<StoreNode>(new StoreNode(std::move(impl)));
}

const std::string& StoreNode::node_id() const {
  return impl_->node_id();
}
bool StoreNode::registered() const {
  return impl_->registered();
}
StoreNodeMetrics StoreNode::Metrics() const {
  return impl_->Metrics();
}

}  // namespace sluice
