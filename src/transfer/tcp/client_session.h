// The initiator's side of one pooled tcp connection to a peer. Other threads
// queue slices (one read or write of registered memory) and notifies with
// Enqueue*(); the loop thread frames them, writes payloads from where they
// live and reads read-responses straight into the local destination. The
// target answers in order, so pending requests form a FIFO.
#ifndef SLUICE_TRANSFER_TCP_CLIENT_SESSION_H_
#define SLUICE_TRANSFER_TCP_CLIENT_SESSION_H_

#include <deque>
#include <functional>
#include <vector>

#include "common/mutex.h"
#include "device/backend.h"
#include "transfer/batch.h"
#include "transfer/tcp/device_staging.h"
#include "transfer/tcp/frame_conn.h"

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

class ClientSession final : public FrameConn {
 public:
  struct Callbacks {
    std::function<void(RegionTable)> on_table;  // A pushed table (loop thread).
    std::function<void(const Status&)> on_closed;
  };

  // `fd` has completed the handshake and is non-blocking. Construct with
  // std::make_shared, then Begin() to start watching the socket.
  // `device` (may be null) stages slices of device memory through pinned
  // slots of `slice_size` bytes (the largest slice this engine sends).
  // `seal` (the handshake's; null without a secret) seals every frame.
  ClientSession(UniqueFd fd, EventLoop* loop, std::string peer, std::chrono::milliseconds timeout,
                Callbacks callbacks, device::DeviceBackend* device = nullptr,
                std::uint64_t slice_size = 0, std::unique_ptr<FrameSeal> seal = nullptr);
  void Begin();

  // Thread-safe. On non-OK (connection closed) nothing was queued.
  Status Enqueue(const Slice& slice);
  Status EnqueueNotify(std::string message);
  // Thread-safe; closes from the loop thread.
  void CloseAsync(const Status& why);

 protected:
  Status OnHeader(const WireHeader& h, Sink* sink, std::uint64_t* follow) override;
  Status OnFrame(const WireHeader& h, std::string_view body) override;
  void OnClosed(const Status& why) override;
  bool AwaitingPeer() const override { return !pending_.empty(); }
  Result<bool> FillPayload(OutFrame& frame) override;
  void OnFrameReleased(const OutFrame& frame) override;

 private:
  struct Item {
    Slice slice;
    std::string notify;  // Non-empty for a notify.
  };
  void ScheduleDrainLocked() SLUICE_REQUIRES(mu_);
  void Drain();
  Status PeerError(const WireHeader& h, std::string_view body) const;
  // The session's staging, made at its first device slice (loop thread).
  Status EnsureStaging();

  Callbacks callbacks_;
  device::DeviceBackend* const device_;
  const std::uint64_t slice_size_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<DeviceStaging> staging_;  // Loop thread only.
  Mutex mu_;
  std::vector<Item> incoming_ SLUICE_GUARDED_BY(mu_);
  bool drain_scheduled_ SLUICE_GUARDED_BY(mu_) = false;
  bool closed_flag_ SLUICE_GUARDED_BY(mu_) = false;
  Status close_status_ SLUICE_GUARDED_BY(mu_);

  // Loop thread only.
  std::vector<Item> draining_;
  std::deque<std::pair<std::uint64_t, Slice>> pending_;  // (request id, slice)
  std::uint64_t next_id_ = 1;
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_TCP_CLIENT_SESSION_H_
