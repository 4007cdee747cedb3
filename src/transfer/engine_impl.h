// Internals behind sluice::TransferEngine: the listener and event loops, the
// local region table, peers, op routing (a path per op, chosen from the
// transports' capabilities) and notify delivery.
#ifndef SLUICE_TRANSFER_ENGINE_IMPL_H_
#define SLUICE_TRANSFER_ENGINE_IMPL_H_

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "sluice/transfer/engine.h"

#include "common/mutex.h"
#include "common/security_keys.h"
#include "device/backend.h"
#include "transfer/control/event_loop.h"
#include "transfer/control/server_conn.h"
#include "transfer/peer.h"
#include "transfer/region_table.h"
#include "transfer/shm/shared_alloc.h"
#include "transfer/transport.h"

namespace sluice::internal {

class EngineImpl final : public ServerHost {
 public:
  static Result<std::unique_ptr<EngineImpl>> Create(const EngineConfig& config);
  ~EngineImpl() override;

  const std::string& endpoint() const { return endpoint_; }
  Result<RegionKey> RegisterMemory(void* addr, std::size_t len, MemoryKind kind, Access access,
                                   int device);
  Status UnregisterMemory(RegionKey key);
  Result<SharedBuffer> AllocateShared(std::size_t len);
  Result<SegmentId> OpenSegment(std::string_view endpoint);
  Result<std::vector<RegionInfo>> SegmentRegions(SegmentId segment) const;
  Result<PeerMemory> MapPeerMemory(SegmentId segment, RegionKey key, std::uint64_t offset,
                                   std::uint64_t length);
  Result<std::shared_ptr<TransferBatch>> Submit(std::span<const TransferRequest> ops,
                                                BatchCallback callback);
  Status Notify(SegmentId segment, std::span<const std::byte> data);
  void SetNotifyHandler(NotifyHandler handler);
  std::vector<TransportStats> TransportCounters() const;

  // ServerHost.
  const std::string& secret() const override { return config_.secret; }
  bool requires_encryption() const override { return config_.encrypt_data; }
  std::uint64_t max_notify_bytes() const override { return config_.max_notify_bytes; }
  HelloOk MakeHelloOk() override;
  void DeliverNotify(const std::string& sender, std::span<const std::byte> data) override;
  void Subscribe(const std::shared_ptr<ServerConn>& c) override;
  void Unsubscribe(ServerConn* c) override;
  std::chrono::milliseconds handshake_timeout() const override { return config_.handshake_timeout; }
  void HandshakeEnded() override { pending_handshakes_.fetch_sub(1); }
  RefusalLog& refusals() override { return refusals_; }
  std::vector<std::unique_ptr<ConnHalf>> ServedHalves(ConnPort* conn) override;

  // Accepts a connection (called by the acceptor on loop 0).
  void Accept(UniqueFd fd, std::string peer);

 private:
  struct Plan;
  explicit EngineImpl(const EngineConfig& config);
  Result<Peer*> FindPeer(SegmentId id) const;
  Status Connect(Peer* peer);
  // Chooses the path of `op` into `route` (path null: it fails through
  // the batch with plan->failure). Non-OK: Submit refuses the batch.
  Status PlanOp(const TransferRequest& op, MemoryKind local_kind, Peer* peer, const Link& link,
                Plan* plan, OpRoute* route) const;
  void PushTable();
  // Checks device memory against the backend and exports it for same-host
  // peers when it has remote access (RegisterMemory's contract).
  // The device of `addr` (checked against `device`, -1 for any) and that
  // [addr, addr + len) lies in one allocation the backend knows.
  Result<int> DescribeDevice(void* addr, std::size_t len, int device) const;
  // Each transport's RegionAccess for a region with remote access.
  Result<RegionPublished> Publish(const RegionView& region) const;

  EngineConfig config_;
  device::DeviceBackend* backend_ = nullptr;  // The process's, per config.device; may be null.
  // Enabled transports, most preferred first (same-host ones ahead).
  std::vector<std::unique_ptr<Transport>> transports_;
  KindSet local_kinds_ = 0;  // What some transport can move from this side.
  std::string endpoint_;
  RegionTableLocal regions_;
  SharedAllocator allocator_;

  Mutex subs_mu_;
  std::vector<std::weak_ptr<ServerConn>> subscribers_ SLUICE_GUARDED_BY(subs_mu_);

  Mutex handler_mu_;
  std::shared_ptr<NotifyHandler> notify_handler_ SLUICE_GUARDED_BY(handler_mu_);

  mutable SharedMutex peers_mu_;
  std::vector<std::unique_ptr<Peer>> peers_ SLUICE_GUARDED_BY(peers_mu_);  // Index = id - 1.
  std::unordered_map<std::string, std::size_t> peer_index_
      SLUICE_GUARDED_BY(peers_mu_);  // By endpoint.

  RefusalLog refusals_{"transfer engine"};
  std::atomic<int> pending_handshakes_{0};  // Accepted, handshake not ended.
  // The transports served on every accepted connection (their factories'
  // `serve`), with what they touch and the bytes they served.
  struct Served {
    const TransportFactory* factory = nullptr;
    std::atomic<std::uint64_t> read{0}, written{0};
    ServeContext ctx;
  };
  std::vector<std::unique_ptr<Served>> served_;
  std::vector<std::unique_ptr<EventLoop>> loops_;
  std::atomic<std::uint64_t> next_loop_{0};
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_ENGINE_IMPL_H_
