#include "transfer/shm/shm_transport.h"

#include <algorithm>
#include <set>
#include <vector>

#include "transfer/batch.h"
#include "transfer/region_table.h"
#include "transfer/shm/copy_pool.h"
#include "transfer/shm/shm_peer.h"

namespace sluice::internal {
namespace {

constexpr std::uint64_t kChunk = std::uint64_t{4} << 20;

// Where [offset, offset + length) of the region `ref` names lies in `m`,
// the mapping of its allocation; kUnavailable when the peer's table points
// outside it (a peer's table is input: never trust its offsets).
Result<char*> MappedRange(const PeerMapping& m, const SharedRef& ref, std::uint64_t offset,
                          std::uint64_t length, const std::string& endpoint) {
  if (ref.offset > m.size || offset > m.size - ref.offset ||
      length > m.size - ref.offset - offset) {
    return UnavailableError(
        "peer " + endpoint + "'s region table points outside its shared allocation",
        FailureScope::kEndpoint);
  }
  return m.addr + ref.offset + offset;
}

class ShmPath final : public TransportPath {
 public:
  ShmPath(Transport* t, std::shared_ptr<ShmPeer> peer, std::string endpoint,
          std::shared_ptr<const std::atomic<bool>> alive, CopyPool* pool)
      : TransportPath(t),
        peer_(std::move(peer)),
        endpoint_(std::move(endpoint)),
        alive_(std::move(alive)),
        pool_(pool) {}

  PlanVerdict Plan(const OpQuery& q, OpRoute* route, Status* failure) override {
    if (q.remote == nullptr) {
      return PlanVerdict::kPass;  // Only the target's own check could say more.
    }
    const TransferRequest& op = q.op;
    const RegionInfo& info = q.remote->info;
    if (!OpFitsPeerRegion(q, failure)) {
      return PlanVerdict::kFail;
    }
    route->unit = kChunk;
    if (SharedRef ref; info.shared && PublishedSharedRef(*q.remote, &ref)) {
      Result<std::shared_ptr<PeerMapping>> m = peer_->Map(ref);
      if (m.ok()) {
        Result<char*> at = MappedRange(**m, ref, op.remote_offset, op.length, endpoint_);
        if (!at.ok()) {
          *failure = at.status();
          return PlanVerdict::kFail;
        }
        route->mapped = *at;
        route->keep = *std::move(m);
        return PlanVerdict::kTake;
      }
    }
    if (peer_->vm_ok()) {
      route->remote_addr = info.addr + op.remote_offset;
      return PlanVerdict::kTake;
    }
    return PlanVerdict::kPass;
  }

  void Post(BatchState* batch, std::span<const TransferRequest> ops,
            std::span<const OpRoute> routes) override {
    std::vector<CopyJob> jobs;
    for (std::uint32_t i = 0; i < ops.size(); ++i) {
      const OpRoute& route = routes[i];
      if (route.path != this) {
        continue;
      }
      const TransferRequest& op = ops[i];
      auto mapping = std::static_pointer_cast<PeerMapping>(route.keep);
      char* local = static_cast<char*>(op.local);
      for (std::uint64_t off = 0; off < op.length; off += kChunk) {
        CopyJob j;
        j.batch = batch;
        j.op_index = i;
        j.write = op.kind == OpKind::kWrite;
        j.local = local + off;
        j.mapping = mapping;
        j.mapped = route.mapped != nullptr ? route.mapped + off : nullptr;
        j.pid = peer_->pid();
        j.remote_addr = route.remote_addr + off;
        j.length = std::min(kChunk, op.length - off);
        j.peer_alive = alive_;
        jobs.push_back(std::move(j));
      }
    }
    pool_->Submit(jobs);
  }

  Result<PeerMemory> Map(const WireRegion& region, std::uint64_t offset,
                         std::uint64_t length) override {
    SharedRef ref;
    if (!region.info.shared || !PublishedSharedRef(region, &ref)) {
      return FailedPreconditionError("region " + std::to_string(region.info.key.value) + " on " +
                                     endpoint_ +
                                     " is not a shared allocation; read it with Submit");
    }
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<PeerMapping> m, peer_->Map(ref));
    SLUICE_ASSIGN_OR_RETURN(const char* at, MappedRange(*m, ref, offset, length, endpoint_));
    PeerMemory out;
    out.data = at;
    out.length = length;
    out.keep = std::move(m);
    return out;
  }

  void OnTable(const RegionTable& table) override {
    std::set<std::uint64_t> live;
    for (const WireRegion& r : table.regions) {
      if (SharedRef ref; PublishedSharedRef(r, &ref)) {
        live.insert(ref.inode);
      }
    }
    peer_->Retain(live);
  }

 private:
  const std::shared_ptr<ShmPeer> peer_;
  const std::string endpoint_;
  const std::shared_ptr<const std::atomic<bool>> alive_;
  CopyPool* const pool_;
};

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(int copy_threads) : pool_(copy_threads) {}

  std::string_view name() const override { return kShmTransportName; }
  const TransportCaps& caps() const override { return caps_; }

  std::shared_ptr<TransportPath> Attach(const PeerLinkInfo& peer) override {
    std::shared_ptr<ShmPeer> shm = ShmPeer::Probe(peer.host);
    if (shm == nullptr) {
      return nullptr;
    }
    return std::make_shared<ShmPath>(this, std::move(shm), peer.endpoint, peer.alive, &pool_);
  }

  // A region in a shared allocation publishes where it lies in it; other
  // memory is reached by process_vm at the address in the table.
  Result<RegionAccess> PackRegion(const RegionView& region) override {
    RegionAccess out;
    if (region.shared != nullptr) {
      AppendSharedRef(RefOf(*region.shared, region.addr), &out.bytes);
    }
    return out;
  }

 private:
  const TransportCaps caps_{.same_host_only = true, .maps = true, .reads_peer_table = true};
  CopyPool pool_;  // Destroyed first among members: finishes running copies, cancels queued.
};

}  // namespace

std::unique_ptr<Transport> MakeShmTransport(int copy_threads) {
  return std::make_unique<ShmTransport>(copy_threads);
}

}  // namespace sluice::internal
