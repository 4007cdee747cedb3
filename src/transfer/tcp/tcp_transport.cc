#include "transfer/tcp/tcp_transport.h"

#include <algorithm>
#include <vector>

#include "transfer/batch.h"
#include "transfer/tcp/client_session.h"

namespace sluice::internal {
namespace {

class TcpPath final : public TransportPath {
 public:
  TcpPath(Transport* t, std::span<const std::shared_ptr<ClientSession>> conns,
          std::uint64_t slice_size)
      : TransportPath(t), conns_(conns.begin(), conns.end()), slice_size_(slice_size) {}

  PlanVerdict Plan(const OpQuery& q, OpRoute* route, Status* /*failure*/) override {
    route->unit = slice_size_;  // The target checks key, range and access.
    route->local_kind = q.local_kind;
    return PlanVerdict::kTake;
  }

  void Post(BatchState* batch, std::span<const TransferRequest> ops,
            std::span<const OpRoute> routes) override {
    for (std::uint32_t i = 0; i < ops.size(); ++i) {
      if (routes[i].path != this) {
        continue;
      }
      const TransferRequest& op = ops[i];
      char* local = static_cast<char*>(op.local);
      for (std::uint64_t off = 0; off < op.length; off += slice_size_) {
        Slice s{batch,
                i,
                op.kind,
                local + off,
                op.remote_key.value,
                op.remote_offset + off,
                std::min(slice_size_, op.length - off),
                routes[i].local_kind == MemoryKind::kDevice};
        const std::uint64_t n = next_.fetch_add(1, std::memory_order_relaxed);
        Status st = conns_[n % conns_.size()]->Enqueue(s);
        if (!st.ok()) {
          batch->UnitDone(i, st);
        }
      }
    }
  }

 private:
  const std::vector<std::shared_ptr<ClientSession>> conns_;
  const std::uint64_t slice_size_;
  std::atomic<std::uint64_t> next_{0};
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(std::uint64_t slice_size, bool local_device) : slice_size_(slice_size) {
    caps_.remote_kinds = KindBit(MemoryKind::kHost) | KindBit(MemoryKind::kDevice);
    caps_.local_kinds = local_device ? caps_.remote_kinds : KindBit(MemoryKind::kHost);
    caps_.served_on_connections = true;
  }

  std::string_view name() const override { return "tcp"; }
  const TransportCaps& caps() const override { return caps_; }

  std::shared_ptr<TransportPath> Attach(const PeerLinkInfo& peer) override {
    if (peer.conns.empty()) {
      return nullptr;
    }
    return std::make_shared<TcpPath>(this, peer.conns, slice_size_);
  }

 private:
  TransportCaps caps_;  // Any peer, no mapping; kinds as constructed.
  const std::uint64_t slice_size_;
};

}  // namespace

std::unique_ptr<Transport> MakeTcpTransport(std::uint64_t slice_size, bool local_device) {
  return std::make_unique<TcpTransport>(slice_size, local_device);
}

}  // namespace sluice::internal
