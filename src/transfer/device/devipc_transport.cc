#include "transfer/device/devipc_transport.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "transfer/batch.h"
#include "transfer/region_table.h"
#include "transfer/shm/shm_peer.h"

namespace sluice::internal {
namespace {

using IpcBytes = std::array<std::uint8_t, 96>;
// Ops are cut into chunks of this size, spread over the copy threads.
constexpr std::uint64_t kDevipcChunk = std::uint64_t{4} << 20;
static_assert(sizeof(IpcBytes) == sizeof(device::IpcHandle::bytes));
constexpr std::string_view kDevipcName = "devipc";

// This transport's blob of a device region: the IPC handle of the device
// allocation holding it and the region's offset in it. A host region in a
// shared allocation is reached through the SharedRef shm publishes.
struct DevBlob {
  IpcBytes ipc{};
  std::uint64_t ipc_offset = 0;
};

std::string PackExported(const IpcBytes& ipc, std::uint64_t offset) {
  std::string out(ipc.size() + 8, '\0');
  std::memcpy(out.data(), ipc.data(), ipc.size());
  std::memcpy(out.data() + ipc.size(), &offset, 8);
  return out;
}

// False when the region has no blob of this transport or a malformed one.
bool ReadBlob(const WireRegion& region, DevBlob* out) {
  const std::string* blob = region.Blob(kDevipcName);
  if (blob == nullptr || blob->size() != out->ipc.size() + 8 ||
      region.info.kind != MemoryKind::kDevice) {
    return false;
  }
  std::memcpy(out->ipc.data(), blob->data(), out->ipc.size());
  std::memcpy(&out->ipc_offset, blob->data() + out->ipc.size(), 8);
  return true;
}

// A peer's device allocation opened here; closed when the last route and
// cache entry holding it let go.
struct OpenedAllocation {
  device::DeviceBackend* backend = nullptr;
  char* base = nullptr;
  std::uint64_t length = 0;  // 0 when the backend cannot say.

  ~OpenedAllocation() {
    if (base != nullptr) {
      Status s = backend->CloseIpc(base);
      if (!s.ok()) {
        SLUICE_LOG(warn, "devipc: closing a peer allocation: {}", s.ToString());
      }
    }
  }
};

struct DevCopy {
  BatchState* batch = nullptr;
  std::uint32_t op_index = 0;
  void* dst = nullptr;
  const void* src = nullptr;
  std::uint64_t length = 0;
  std::shared_ptr<void> keep;  // The peer's memory stays open (or mapped).
};

// Copy threads, each with its own stream and event: a thread takes what is
// queued, queues every copy on its stream, records the event once and
// reports the copies when it is reached.
class DevCopyPool {
 public:
  DevCopyPool(device::DeviceBackend* backend, std::chrono::milliseconds timeout)
      : backend_(backend), timeout_(timeout) {}

  Status Start(int threads) {
    for (int i = 0; i < threads; ++i) {
      SLUICE_ASSIGN_OR_RETURN(device::Stream s, backend_->CreateStream(0));
      SLUICE_ASSIGN_OR_RETURN(device::Event e, backend_->CreateEvent());
      threads_.emplace_back([this, s, e] { Run(s, e); });
    }
    return Status::Ok();
  }

  // Fails queued copies with kCancelled; running ones finish first.
  ~DevCopyPool() {
    std::deque<DevCopy> dropped;
    {
      MutexLock lock(mu_);
      stopping_ = true;
      dropped.swap(jobs_);
    }
    cv_.NotifyAll();
    for (DevCopy& j : dropped) {
      j.batch->UnitDone(j.op_index,
                        Status(StatusCode::kCancelled, "transfer engine is shutting down"));
    }
    for (std::thread& t : threads_) {
      t.join();
    }
  }

  void Submit(std::vector<DevCopy>& jobs) {
    {
      MutexLock lock(mu_);
      if (!stopping_) {
        for (DevCopy& j : jobs) {
          jobs_.push_back(std::move(j));
        }
        jobs.clear();
      }
    }
    for (DevCopy& j : jobs) {  // Only when stopping.
      j.batch->UnitDone(j.op_index,
                        Status(StatusCode::kCancelled, "transfer engine is shutting down"));
    }
    cv_.NotifyAll();
  }

 private:
  // A thread takes queued copies until they add up to kGroupBytes (at
  // least one), so large ops' chunks spread over the threads and their
  // streams while small copies still share one wait. 1 MiB, not a whole
  // 4 MiB chunk: a chunked payload's runs (~75 KB each for a latent cut in
  // 8) then land a chunk at a time instead of ~4 MiB at a time, which took
  // the first chunk from 0.73x to 0.35x of the whole payload's arrival.
  static constexpr std::uint64_t kGroupBytes = std::uint64_t{1} << 20;

  void Run(device::Stream stream, device::Event event) {
    std::vector<DevCopy> group;
    std::vector<bool> queued;
    while (true) {
      {
        MutexLock lock(mu_);
        cv_.Wait(lock, [this]() SLUICE_REQUIRES(mu_) { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) {
          break;  // Stopping, and nothing left.
        }
        std::uint64_t bytes = 0;
        while (!jobs_.empty() && (group.empty() || bytes + jobs_.front().length <= kGroupBytes)) {
          bytes += jobs_.front().length;
          group.push_back(std::move(jobs_.front()));
          jobs_.pop_front();
        }
      }
      queued.assign(group.size(), false);
      for (std::size_t i = 0; i < group.size(); ++i) {
        const DevCopy& j = group[i];
        Status s = backend_->CopyAsync(j.dst, j.src, j.length, stream);
        if (s.ok()) {
          queued[i] = true;
        } else {
          j.batch->UnitDone(j.op_index, s.WithContext("devipc copy"));
        }
      }
      Status done = backend_->Record(event, stream);
      if (done.ok()) {
        done = backend_->Wait(event, timeout_);
      }
      for (std::size_t i = 0; i < group.size(); ++i) {
        if (queued[i]) {
          group[i].batch->UnitDone(group[i].op_index,
                                   done.ok() ? done : done.WithContext("devipc copy"));
        }
      }
      group.clear();  // Drops the peer allocations the copies held.
    }
    (void)backend_->DestroyEvent(event);
    (void)backend_->DestroyStream(stream);
  }

  device::DeviceBackend* const backend_;
  const std::chrono::milliseconds timeout_;
  Mutex mu_;
  CondVar cv_;
  std::deque<DevCopy> jobs_ SLUICE_GUARDED_BY(mu_);
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

class DevIpcPath final : public TransportPath {
 public:
  // `shm` maps the peer's shared host allocations; null when it cannot
  // (another pid namespace), and then only device memory there is served.
  DevIpcPath(Transport* t, device::DeviceBackend* backend, DevCopyPool* pool, std::string endpoint,
             std::shared_ptr<ShmPeer> shm)
      : TransportPath(t),
        backend_(backend),
        pool_(pool),
        endpoint_(std::move(endpoint)),
        shm_(std::move(shm)) {}

  PlanVerdict Plan(const OpQuery& q, OpRoute* route, Status* failure) override {
    if (q.remote == nullptr) {
      return PlanVerdict::kPass;  // Only the target's own check could say more.
    }
    const TransferRequest& op = q.op;
    const WireRegion& region = *q.remote;
    if (region.info.kind == MemoryKind::kHost) {
      SharedRef ref;
      if (!PublishedSharedRef(region, &ref)) {
        return PlanVerdict::kPass;  // Not in a shared allocation: another path's.
      }
      return PlanHost(q, ref, route, failure);
    }
    DevBlob blob;
    if (!ReadBlob(region, &blob)) {
      return PlanVerdict::kPass;  // Not exported device memory: another path's.
    }
    if (!OpFitsPeerRegion(q, failure)) {
      return PlanVerdict::kFail;
    }
    Result<std::shared_ptr<OpenedAllocation>> opened = Open(blob.ipc);
    if (!opened.ok()) {
      *failure = opened.status().WithContext("devipc to " + endpoint_);
      return PlanVerdict::kFail;
    }
    const OpenedAllocation& a = **opened;
    // A peer's table is input: its offset must land inside the allocation.
    const std::uint64_t start = blob.ipc_offset + op.remote_offset;
    if (a.length != 0 &&
        (start < blob.ipc_offset || start > a.length || op.length > a.length - start)) {
      *failure = UnavailableError(
          "peer " + endpoint_ + "'s region table points outside its device allocation",
          FailureScope::kEndpoint);
      return PlanVerdict::kFail;
    }
    route->unit = kDevipcChunk;  // One copy and completion per chunk.
    route->mapped = a.base + start;
    route->keep = *std::move(opened);
    return PlanVerdict::kTake;
  }

  void Post(BatchState* batch, std::span<const TransferRequest> ops,
            std::span<const OpRoute> routes) override {
    std::vector<DevCopy> jobs;
    for (std::uint32_t i = 0; i < ops.size(); ++i) {
      const OpRoute& route = routes[i];
      if (route.path != this) {
        continue;
      }
      const TransferRequest& op = ops[i];
      const bool write = op.kind == OpKind::kWrite;
      char* local = static_cast<char*>(op.local);
      const std::shared_ptr<void>& keep = route.keep;
      for (std::uint64_t off = 0; off < op.length; off += kDevipcChunk) {
        DevCopy j;
        j.batch = batch;
        j.op_index = i;
        j.dst = write ? static_cast<void*>(route.mapped + off) : local + off;
        j.src = write ? static_cast<const void*>(local + off) : route.mapped + off;
        j.length = std::min(kDevipcChunk, op.length - off);
        j.keep = keep;
        jobs.push_back(std::move(j));
      }
    }
    pool_->Submit(jobs);
  }

  // Allocations no region of the new table names are closed once the
  // copies using them are done.
  void OnTable(const RegionTable& table) override {
    std::set<IpcBytes> live;
    std::set<std::uint64_t> live_shared;
    for (const WireRegion& r : table.regions) {
      if (DevBlob b; ReadBlob(r, &b)) {
        live.insert(b.ipc);
      } else if (SharedRef ref; PublishedSharedRef(r, &ref)) {
        live_shared.insert(ref.inode);
      }
    }
    if (shm_ != nullptr) {
      shm_->Retain(live_shared);
    }
    MutexLock lock(mu_);
    std::erase_if(opened_, [&](const auto& kv) { return live.count(kv.first) == 0; });
  }

  void OnDown() override {
    if (shm_ != nullptr) {
      shm_->Retain({});  // Unmapped as the copies still holding them end.
    }
    MutexLock lock(mu_);
    down_.store(true, std::memory_order_release);
    opened_.clear();  // Closed as the copies still holding them end.
  }

 private:
  // The peer's host memory with device memory here: copied by the backend
  // straight between the device and the peer's shared allocation mapped
  // here (no staging, no other host copy). Host memory at both ends, or an
  // allocation that cannot be mapped, is another path's (shm, tcp).
  PlanVerdict PlanHost(const OpQuery& q, const SharedRef& ref, OpRoute* route, Status* failure) {
    const WireRegion& region = *q.remote;
    if (q.local_kind != MemoryKind::kDevice || shm_ == nullptr || !region.info.shared) {
      return PlanVerdict::kPass;
    }
    const TransferRequest& op = q.op;
    if (!OpFitsPeerRegion(q, failure)) {
      return PlanVerdict::kFail;
    }
    if (down_.load(std::memory_order_acquire)) {
      *failure = UnavailableError("peer " + endpoint_ + " is down", FailureScope::kEndpoint);
      return PlanVerdict::kFail;
    }
    Result<std::shared_ptr<PeerMapping>> m = shm_->Map(ref);
    if (!m.ok()) {
      return PlanVerdict::kPass;  // The kernel refused: tcp stages it instead.
    }
    const PeerMapping& mapping = **m;
    if (ref.offset > mapping.size || op.remote_offset > mapping.size - ref.offset ||
        op.length > mapping.size - ref.offset - op.remote_offset) {
      *failure = UnavailableError(
          "peer " + endpoint_ + "'s region table points outside its shared allocation",
          FailureScope::kEndpoint);
      return PlanVerdict::kFail;
    }
    route->unit = kDevipcChunk;
    route->mapped = mapping.addr + ref.offset + op.remote_offset;
    route->keep = *std::move(m);
    return PlanVerdict::kTake;
  }

  Result<std::shared_ptr<OpenedAllocation>> Open(const IpcBytes& ipc) {
    MutexLock lock(mu_);
    if (down_.load(std::memory_order_acquire)) {
      return UnavailableError("peer " + endpoint_ + " is down", FailureScope::kEndpoint);
    }
    if (auto it = opened_.find(ipc); it != opened_.end()) {
      return it->second;
    }
    device::IpcHandle h;
    std::memcpy(h.bytes.data(), ipc.data(), ipc.size());
    SLUICE_ASSIGN_OR_RETURN(void* base, backend_->OpenIpc(h));
    auto a = std::make_shared<OpenedAllocation>();
    a->backend = backend_;
    a->base = static_cast<char*>(base);
    if (Result<device::PointerInfo> info = backend_->Attributes(base); info.ok()) {
      a->length = info->length;
    }
    opened_.emplace(ipc, a);
    return a;
  }

  device::DeviceBackend* const backend_;
  DevCopyPool* const pool_;
  const std::string endpoint_;
  const std::shared_ptr<ShmPeer> shm_;
  Mutex mu_;
  std::map<IpcBytes, std::shared_ptr<OpenedAllocation>> opened_ SLUICE_GUARDED_BY(mu_);
  // The link went down: nothing more opens or maps (read without the lock
  // on each op's plan).
  std::atomic<bool> down_{false};
};

class DevIpcTransport final : public Transport {
 public:
  DevIpcTransport(device::DeviceBackend* backend, std::chrono::milliseconds timeout)
      : backend_(backend), pool_(backend, timeout) {}

  Status Start(int threads) { return pool_.Start(threads); }

  std::string_view name() const override { return kDevipcName; }
  const TransportCaps& caps() const override { return caps_; }

  std::shared_ptr<TransportPath> Attach(const PeerLinkInfo& peer) override {
    // The backend's IPC reaches processes of this host (its id too) and
    // pid namespace.
    const HostInfo& self = HostInfo::Self();
    if (!self.SameHostAs(peer.host) || peer.host.pid_ns != self.pid_ns) {
      return nullptr;
    }
    return std::make_shared<DevIpcPath>(this, backend_, &pool_, peer.endpoint,
                                        ShmPeer::Probe(peer.host));
  }

  // Device memory publishes its allocation's IPC handle (when the backend
  // knows the allocation and exports it).
  Result<RegionAccess> PackRegion(const RegionView& region) override {
    RegionAccess out;
    if (region.kind == MemoryKind::kHost) {
      return out;
    }
    SLUICE_ASSIGN_OR_RETURN(device::PointerInfo info, backend_->Attributes(region.addr));
    if (info.length == 0) {
      return out;  // The backend does not know the allocation: not exported.
    }
    Result<device::IpcHandle> h = backend_->ExportIpc(const_cast<void*>(info.base));
    if (!h.ok()) {
      SLUICE_LOG(info, "device region not exported to same-host peers: {}", h.status().ToString());
      return out;
    }
    IpcBytes ipc;
    std::memcpy(ipc.data(), h->bytes.data(), ipc.size());
    out.bytes = PackExported(ipc, reinterpret_cast<std::uintptr_t>(region.addr) -
                                      reinterpret_cast<std::uintptr_t>(info.base));
    return out;
  }

 private:
  const TransportCaps caps_{
      .local_kinds =
          static_cast<KindSet>(KindBit(MemoryKind::kHost) | KindBit(MemoryKind::kDevice)),
      .remote_kinds =
          static_cast<KindSet>(KindBit(MemoryKind::kHost) | KindBit(MemoryKind::kDevice)),
      .same_host_only = true,
      .maps = false,
      .reads_peer_table = true,
  };
  device::DeviceBackend* const backend_;
  DevCopyPool pool_;  // Destroyed first: finishes running copies, cancels queued ones.
};

}  // namespace

Result<std::unique_ptr<Transport>> MakeDevIpcTransport(device::DeviceBackend* backend,
                                                       int copy_threads,
                                                       std::chrono::milliseconds op_timeout) {
  if (backend == nullptr) {
    return InvalidArgumentError("devipc: no device backend");
  }
  if (copy_threads < 1 || copy_threads > 64) {
    return InvalidArgumentError("devipc: copy threads must be in 1..64");
  }
  auto t = std::make_unique<DevIpcTransport>(backend, op_timeout);
  SLUICE_RETURN_IF_ERROR(t->Start(copy_threads));
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace sluice::internal
