#include "transfer/tcp/tcp_transport.h"

#include <algorithm>
#include <vector>

#include "transfer/batch.h"
#include "transfer/tcp/op_client.h"
#include "transfer/tcp/op_server.h"

namespace sluice::internal {
namespace {

class TcpPath final : public TransportPath {
 public:
  TcpPath(Transport* t, std::vector<TcpOpClient*> conns, std::uint64_t slice_size)
      : TransportPath(t), conns_(std::move(conns)), slice_size_(slice_size) {}

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
  const std::vector<TcpOpClient*> conns_;  // Its halves; they live as long as the link.
  const std::uint64_t slice_size_;
  std::atomic<std::uint64_t> next_{0};
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(std::uint64_t slice_size, bool local_device, device::DeviceBackend* device,
               std::chrono::milliseconds timeout)
      : slice_size_(slice_size), device_(device), timeout_(timeout) {
    caps_.remote_kinds = KindBit(MemoryKind::kHost) | KindBit(MemoryKind::kDevice);
    caps_.local_kinds = local_device ? caps_.remote_kinds : KindBit(MemoryKind::kHost);
  }

  std::string_view name() const override { return "tcp"; }
  const TransportCaps& caps() const override { return caps_; }

  std::shared_ptr<TransportPath> Attach(const PeerLinkInfo& peer) override {
    if (peer.halves.empty()) {
      return nullptr;
    }
    std::vector<TcpOpClient*> conns;
    for (ConnHalf* h : peer.halves) {
      conns.push_back(static_cast<TcpOpClient*>(h));  // Made by ClientHalf.
    }
    return std::make_shared<TcpPath>(this, std::move(conns), slice_size_);
  }

  std::unique_ptr<ConnHalf> ClientHalf(ConnPort* conn) override {
    return std::make_unique<TcpOpClient>(conn, device_, slice_size_, timeout_);
  }

 private:
  TransportCaps caps_;  // Any peer, no mapping; kinds as constructed.
  const std::uint64_t slice_size_;
  device::DeviceBackend* const device_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<Transport> MakeTcpTransport(std::uint64_t slice_size, bool local_device,
                                            device::DeviceBackend* device,
                                            std::chrono::milliseconds timeout) {
  return std::make_unique<TcpTransport>(slice_size, local_device, device, timeout);
}

std::unique_ptr<ConnHalf> ServeTcp(ConnPort* conn, const ServeContext& ctx) {
  return std::make_unique<TcpOpServer>(conn, ctx);
}

}  // namespace sluice::internal
