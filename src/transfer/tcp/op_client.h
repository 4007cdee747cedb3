// tcp's half of an initiator's control-plane connection (conn_half.h): other
// threads queue slices (one read or write of registered memory) with
// Enqueue(); the loop thread frames them, writes payloads from where they
// live and reads read-responses straight into the local destination. The
// target answers in order, so pending requests form a FIFO.
#ifndef SLUICE_TRANSFER_TCP_OP_CLIENT_H_
#define SLUICE_TRANSFER_TCP_OP_CLIENT_H_

#include <deque>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "device/backend.h"
#include "transfer/batch.h"
#include "transfer/control/conn_half.h"
#include "transfer/tcp/device_staging.h"

namespace sluice::internal {

struct Slice {
  BatchState* batch = nullptr;
  std::uint32_t op_index = 0;
  OpKind kind = OpKind::kWrite;
  char* local = nullptr;
  std::uint64_t key = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  bool local_device = false;  // `local` is device memory: staged through pinned slots.
};

class TcpOpClient final : public ConnHalf {
 public:
  // `conn` outlives this half (it owns it). `device` (may be null) stages
  // slices of device memory through pinned slots of `slice_size` bytes
  // (the largest slice this engine sends); `timeout` bounds a staging copy.
  TcpOpClient(ConnPort* conn, device::DeviceBackend* device, std::uint64_t slice_size,
              std::chrono::milliseconds timeout);

  // Thread-safe. Every slice queued reports exactly once through its
  // batch; on non-OK (the connection closed) nothing was queued.
  Status Enqueue(const Slice& slice);

  bool Claims(FrameType type) const override {
    return type == FrameType::kWriteAck || type == FrameType::kReadResp;
  }
  Status OnHeader(const WireHeader& h, FrameConn::Sink* sink, std::uint64_t* follow) override;
  Status OnFrame(const WireHeader& h, std::string_view body) override;
  bool AwaitingPeer() const override { return !pending_.empty(); }
  Result<bool> FillPayload(FrameConn::OutFrame& frame) override;
  void OnFrameReleased(const FrameConn::OutFrame& frame) override;
  void OnClosed(const Status& failure) override;

 private:
  void Drain();
  // The half's staging, made at its first device slice (loop thread).
  Status EnsureStaging();

  ConnPort* const conn_;
  device::DeviceBackend* const device_;
  const std::uint64_t slice_size_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<DeviceStaging> staging_;  // Loop thread only.
  Mutex mu_;
  std::vector<Slice> incoming_ SLUICE_GUARDED_BY(mu_);
  bool drain_scheduled_ SLUICE_GUARDED_BY(mu_) = false;
  bool closed_flag_ SLUICE_GUARDED_BY(mu_) = false;
  Status close_status_ SLUICE_GUARDED_BY(mu_);

  // Loop thread only.
  std::vector<Slice> draining_;
  std::deque<std::pair<std::uint64_t, Slice>> pending_;  // (request id, slice)
  std::uint64_t next_id_ = 1;
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_TCP_OP_CLIENT_H_
