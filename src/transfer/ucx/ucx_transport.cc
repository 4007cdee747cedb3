#include "transfer/ucx/ucx_transport.h"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "transfer/batch.h"
#include "transfer/region_table.h"
#include "transfer/ucx/ucx_worker.h"

namespace sluice::internal {
namespace {

constexpr std::string_view kUcxName = "ucx";
using Clock = std::chrono::steady_clock;

struct UcxOp {
  std::uint32_t op_index = 0;
  bool write = false;
  char* local = nullptr;
  std::uint64_t remote_addr = 0;
  std::uint64_t length = 0;
  std::uint64_t key = 0;                    // The region's, for its remote key.
  std::shared_ptr<const std::string> rkey;  // Its packed remote key.
};

// The ops one Post handed the worker, reported together once every request
// (and, with writes among them, the flush after them) has ended.
struct Group {
  BatchState* batch = nullptr;
  std::vector<UcxOp> ops;
  std::vector<Status> results;  // Per op.
  int pending = 0;              // Requests not yet ended.
  Clock::time_point deadline;
  std::uint64_t id = 0;
};

// What the worker's thread keeps of one peer: touched only there.
class PeerState : public std::enable_shared_from_this<PeerState> {
 public:
  PeerState(std::string address, std::string endpoint, std::chrono::milliseconds timeout)
      : address_(std::move(address)), endpoint_(std::move(endpoint)), timeout_(timeout) {}

  // Posts the group's ops (opening the endpoint first if needed); reports
  // them when they end.
  void Post(ucp_worker_h worker, std::shared_ptr<Group> group) {
    Group* g = group.get();
    g->deadline = Clock::now() + timeout_;
    g->id = ++next_group_;
    g->results.assign(g->ops.size(), Status::Ok());
    groups_.emplace(g->id, std::move(group));
    if (Status s = Open(worker); !s.ok()) {
      for (Status& r : g->results) {
        r = s;
      }
      Finish(g);
      return;
    }
    bool writes = false;
    for (std::size_t i = 0; i < g->ops.size(); ++i) {
      const UcxOp& op = g->ops[i];
      Result<ucp_rkey_h> rkey = RemoteKey(op.key, *op.rkey);
      if (!rkey.ok()) {
        g->results[i] = rkey.status();
        continue;
      }
      writes = writes || op.write;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.send = &PeerState::OpEnded;
      param.user_data = new Ended{weak_from_this(), g->id, i};
      ucs_status_ptr_t r =
          op.write ? ucp_put_nbx(ep_, op.local, op.length, op.remote_addr, *rkey, &param)
                   : ucp_get_nbx(ep_, op.local, op.length, op.remote_addr, *rkey, &param);
      Track(g, r, static_cast<Ended*>(param.user_data));
    }
    if (writes) {  // A put is complete at the target only after a flush.
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.send = &PeerState::OpEnded;
      param.user_data = new Ended{weak_from_this(), g->id, kFlush};
      Track(g, ucp_ep_flush_nbx(ep_, &param), static_cast<Ended*>(param.user_data));
    }
    if (g->pending == 0) {
      Finish(g);
    }
  }

  // Closes the endpoint when an op is past its deadline: every op on it
  // fails. Returns whether it did.
  bool CheckDeadlines(Clock::time_point now) {
    for (const auto& [id, g] : groups_) {
      if (g->pending > 0 && now > g->deadline) {
        Close(UnavailableError("ucx ops to " + endpoint_ + " took longer than " +
                                   std::to_string(timeout_.count()) + " ms",
                               FailureScope::kEndpoint));
        return true;
      }
    }
    return false;
  }

  // Drops the remote keys of regions not in `live`.
  void Retain(const std::set<std::uint64_t>& live) {
    for (auto it = rkeys_.begin(); it != rkeys_.end();) {
      if (live.count(it->first) == 0) {
        ucp_rkey_destroy(it->second);
        it = rkeys_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // The peer is gone or the link closed: every op in flight fails, the
  // endpoint is closed. Nothing opens again (the next link has its own).
  void Close(const Status& why) {
    down_ = true;
    why_ = why;
    Retain({});
    if (ep_ != nullptr) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &param);
      if (UCS_PTR_IS_PTR(r)) {
        ucp_request_free(r);  // Completes as the worker progresses.
      }
      ep_ = nullptr;
    }
    // Every op still in flight fails now; the callbacks of its requests,
    // whenever they come, find its group gone.
    while (!groups_.empty()) {
      Group* g = groups_.begin()->second.get();
      for (Status& r : g->results) {
        if (r.ok()) {
          r = why;
        }
      }
      Finish(g);
    }
  }

 private:
  static constexpr std::size_t kFlush = ~std::size_t{0};

  struct Ended {
    std::weak_ptr<PeerState> peer;
    std::uint64_t group;
    std::size_t op;  // kFlush for the flush.
  };

  Status Open(ucp_worker_h worker) {
    if (down_) {
      return why_;
    }
    if (ep_ != nullptr) {
      return Status::Ok();
    }
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.address = reinterpret_cast<const ucp_address_t*>(address_.data());
    // No UCX peer-failure mode (its shared-memory transports offer none): a
    // dead peer closes the engine's link (OnDown) and a stalled one misses
    // its deadline, and either closes the endpoint.
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    const ucs_status_t s = ucp_ep_create(worker, &params, &ep_);
    if (s != UCS_OK) {
      ep_ = nullptr;
      return UnavailableError("ucx cannot reach " + endpoint_ + ": " + ucs_status_string(s),
                              FailureScope::kEndpoint);
    }
    return Status::Ok();
  }

  Result<ucp_rkey_h> RemoteKey(std::uint64_t key, const std::string& packed) {
    if (auto it = rkeys_.find(key); it != rkeys_.end()) {
      return it->second;
    }
    ucp_rkey_h rkey = nullptr;
    ucs_status_t s = ucp_ep_rkey_unpack(ep_, packed.data(), &rkey);
    if (s != UCS_OK) {
      return UnavailableError("ucx: peer " + endpoint_ + "'s remote key for region " +
                                  std::to_string(key) + ": " + ucs_status_string(s),
                              FailureScope::kEndpoint);
    }
    rkeys_.emplace(key, rkey);
    return rkey;
  }

  // Counts a request just posted: ended at once (a status, not a request)
  // or pending until its callback.
  void Track(Group* g, ucs_status_ptr_t r, Ended* ended) {
    if (UCS_PTR_IS_PTR(r)) {
      ++g->pending;
      return;
    }
    Record(g, ended->op, UCS_PTR_STATUS(r));
    delete ended;
  }

  void Record(Group* g, std::size_t op, ucs_status_t s) const {
    if (s == UCS_OK) {
      return;
    }
    const Status failed =
        UnavailableError("ucx " + std::string(op == kFlush ? "flush" : "op") + " to " + endpoint_ +
                             " failed: " + ucs_status_string(s),
                         FailureScope::kEndpoint);
    for (std::size_t i = 0; i < g->results.size(); ++i) {
      if ((op == kFlush ? g->ops[i].write : i == op) && g->results[i].ok()) {
        g->results[i] = failed;
      }
    }
  }

  static void OpEnded(void* request, ucs_status_t status, void* user_data) {
    std::unique_ptr<Ended> ended(static_cast<Ended*>(user_data));
    ucp_request_free(request);
    std::shared_ptr<PeerState> peer = ended->peer.lock();
    if (peer == nullptr) {
      return;
    }
    auto it = peer->groups_.find(ended->group);
    if (it == peer->groups_.end()) {
      return;  // Failed already when the endpoint closed.
    }
    Group* g = it->second.get();
    peer->Record(g, ended->op, status);
    if (--g->pending == 0) {
      peer->Finish(g);
    }
  }

  void Finish(Group* g) {
    for (std::size_t i = 0; i < g->ops.size(); ++i) {
      g->batch->UnitDone(g->ops[i].op_index, g->results[i]);
    }
    groups_.erase(g->id);
  }

  const std::string address_;
  const std::string endpoint_;
  const std::chrono::milliseconds timeout_;
  ucp_ep_h ep_ = nullptr;
  bool down_ = false;
  Status why_;
  std::unordered_map<std::uint64_t, ucp_rkey_h> rkeys_;
  std::uint64_t next_group_ = 0;
  std::map<std::uint64_t, std::shared_ptr<Group>> groups_;
};

class UcxPath final : public TransportPath {
 public:
  UcxPath(Transport* t, std::shared_ptr<UcxWorker> worker, std::shared_ptr<PeerState> peer,
          std::string endpoint)
      : TransportPath(t),
        worker_(std::move(worker)),
        peer_(std::move(peer)),
        endpoint_(std::move(endpoint)) {}

  ~UcxPath() override {
    worker_->Run([peer = peer_](ucp_worker_h) {
      peer->Close(UnavailableError("the link to the peer was replaced", FailureScope::kEndpoint));
    });
  }

  PlanVerdict Plan(const OpQuery& q, OpRoute* route, Status* failure) override {
    if (q.remote == nullptr || q.local_kind != MemoryKind::kHost) {
      return PlanVerdict::kPass;
    }
    const std::string* blob = q.remote->Blob(kUcxName);
    if (blob == nullptr || blob->empty()) {
      return PlanVerdict::kPass;  // Not mapped for ucx: another path's.
    }
    const TransferRequest& op = q.op;
    const RegionInfo& info = q.remote->info;
    if (!OpFitsPeerRegion(q, failure)) {
      return PlanVerdict::kFail;
    }
    if (down_.load(std::memory_order_acquire)) {
      *failure = UnavailableError("peer " + endpoint_ + " is down", FailureScope::kEndpoint);
      return PlanVerdict::kFail;
    }
    route->unit = op.length;  // One completion per op.
    route->remote_addr = info.addr + op.remote_offset;
    route->keep = Packed(info.key.value, *blob);
    return PlanVerdict::kTake;
  }

  void Post(BatchState* batch, std::span<const TransferRequest> ops,
            std::span<const OpRoute> routes) override {
    auto group = std::make_shared<Group>();
    group->batch = batch;
    for (std::uint32_t i = 0; i < ops.size(); ++i) {
      if (routes[i].path != this) {
        continue;
      }
      const TransferRequest& op = ops[i];
      group->ops.push_back(UcxOp{i, op.kind == OpKind::kWrite, static_cast<char*>(op.local),
                                 routes[i].remote_addr, op.length, op.remote_key.value,
                                 std::static_pointer_cast<const std::string>(routes[i].keep)});
    }
    worker_->Run([peer = peer_, g = std::move(group)](ucp_worker_h w) { peer->Post(w, g); });
  }

  void OnTable(const RegionTable& table) override {
    std::set<std::uint64_t> live;
    for (const WireRegion& r : table.regions) {
      live.insert(r.info.key.value);
    }
    {
      MutexLock lock(mu_);
      std::erase_if(packed_, [&](const auto& kv) { return live.count(kv.first) == 0; });
    }
    worker_->Run([peer = peer_, live = std::move(live)](ucp_worker_h) { peer->Retain(live); });
  }

  void OnDown() override {
    down_.store(true, std::memory_order_release);
    worker_->Run([peer = peer_](ucp_worker_h) {
      peer->Close(UnavailableError("the link to the peer went down", FailureScope::kEndpoint));
    });
  }

 private:
  // The region's packed remote key, shared by its ops (copied once per
  // region, not per op).
  std::shared_ptr<std::string> Packed(std::uint64_t key, const std::string& blob) {
    MutexLock lock(mu_);
    auto it = packed_.find(key);
    if (it == packed_.end() || *it->second != blob) {
      it = packed_.insert_or_assign(key, std::make_shared<std::string>(blob)).first;
    }
    return it->second;
  }

  const std::shared_ptr<UcxWorker> worker_;
  const std::shared_ptr<PeerState> peer_;
  const std::string endpoint_;
  std::atomic<bool> down_{false};
  Mutex mu_;
  std::unordered_map<std::uint64_t, std::shared_ptr<std::string>> packed_ SLUICE_GUARDED_BY(mu_);
};

// The peers whose ops have deadlines, looked at on each tick of the
// worker's thread (and touched only there).
struct Watchlist {
  std::vector<std::weak_ptr<PeerState>> peers;

  void Add(const std::shared_ptr<PeerState>& p) {
    std::erase_if(peers, [](const std::weak_ptr<PeerState>& w) { return w.expired(); });
    peers.push_back(p);
  }
  void Check() {
    const auto now = Clock::now();
    for (const auto& w : peers) {
      if (auto p = w.lock()) {
        p->CheckDeadlines(now);
      }
    }
  }
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(std::shared_ptr<UcxContext> ctx, std::shared_ptr<UcxWorker> worker,
               std::chrono::milliseconds timeout)
      : ctx_(std::move(ctx)), worker_(std::move(worker)), timeout_(timeout) {
    worker_->SetTick([list = watch_] { list->Check(); });
  }

  std::string_view name() const override { return kUcxName; }
  const TransportCaps& caps() const override { return caps_; }

  std::shared_ptr<TransportPath> Attach(const PeerLinkInfo& peer) override {
    if (peer.link.empty()) {
      return nullptr;  // The peer runs no ucx.
    }
    auto state = std::make_shared<PeerState>(std::string(peer.link), peer.endpoint, timeout_);
    worker_->Run([list = watch_, state](ucp_worker_h) { list->Add(state); });
    return std::make_shared<UcxPath>(this, worker_, std::move(state), peer.endpoint);
  }

  Result<RegionAccess> PackRegion(const RegionView& region) override {
    RegionAccess out;
    if (region.kind != MemoryKind::kHost) {
      return out;
    }
    const auto bits = static_cast<std::uint8_t>(region.access);
    SLUICE_ASSIGN_OR_RETURN(
        out.hold,
        UcxMemory::Map(ctx_, region.addr, region.length,
                       (bits & static_cast<std::uint8_t>(Access::kRemoteRead)) != 0,
                       (bits & static_cast<std::uint8_t>(Access::kRemoteWrite)) != 0, &out.bytes));
    return out;
  }

  std::string LinkBlob() const override { return worker_->address(); }

 private:
  const TransportCaps caps_{.reads_peer_table = true};  // Host memory, any peer.
  const std::shared_ptr<UcxContext> ctx_;
  const std::shared_ptr<UcxWorker> worker_;
  const std::chrono::milliseconds timeout_;
  const std::shared_ptr<Watchlist> watch_ = std::make_shared<Watchlist>();
};

}  // namespace

Result<std::unique_ptr<Transport>> MakeUcxTransport(const EngineConfig& config) {
  if (config.encrypt_data) {
    return FailedPreconditionError(
        "ucx moves bytes outside the engine's sealed connections: it cannot serve "
        "config.encrypt_data (use tcp)");
  }
  SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<UcxContext> ctx, UcxContext::Create());
  SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<UcxWorker> worker, UcxWorker::Start(ctx));
  return std::unique_ptr<Transport>(
      std::make_unique<UcxTransport>(std::move(ctx), std::move(worker), config.op_timeout));
}

void UcxRank(double* gbps, double* latency_us) {
  // docs/benchmarks/transfer.md: 16 MiB writes over UCX_TLS=sm and =tcp.
  *gbps = 9.1;
  *latency_us = 73;
  const char* env = std::getenv("UCX_TLS");
  const std::string_view tls = env == nullptr ? "all" : env;
  if (tls.starts_with('^')) {
    return;  // All but those named.
  }
  bool tcp = false;
  for (std::size_t at = 0; at <= tls.size();) {
    const std::size_t comma = std::min(tls.find(',', at), tls.size());
    const std::string_view t = tls.substr(at, comma - at);
    for (std::string_view shared : {"all", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem"}) {
      if (t == shared) {
        return;
      }
    }
    tcp = tcp || t == "tcp";
    at = comma + 1;
  }
  if (tcp) {
    *gbps = 2.61;
    *latency_us = 175;
  }
}

}  // namespace sluice::internal
