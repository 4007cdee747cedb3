// The initiator's side of one pooled control-plane connection to a peer,
// after its handshake: region-table pushes from the peer (on the first
// connection) and notifies to it, in the order they were queued. The
// frames of a transport riding the connection (ConnHalf) go to its half.
#ifndef SLUICE_TRANSFER_CONTROL_CLIENT_CONN_H_
#define SLUICE_TRANSFER_CONTROL_CLIENT_CONN_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "transfer/control/conn_half.h"
#include "transfer/control/frame_conn.h"
#include "transfer/region_table.h"

namespace sluice::internal {

class ClientConn final : public ControlConn {
 public:
  struct Callbacks {
    std::function<void(RegionTable)> on_table;  // A pushed table (loop thread).
    // The connection closed (loop thread), before its half fails its ops.
    std::function<void(const Status&)> on_closed;
  };

  // `fd` has completed the handshake and is non-blocking; `seal` (the
  // handshake's; null without a secret) seals every frame. Construct with
  // std::make_shared, give it its half (SetHalf) if a transport rides it,
  // then Begin() to start watching the socket.
  ClientConn(UniqueFd fd, EventLoop* loop, std::string peer, std::chrono::milliseconds timeout,
             Callbacks callbacks, std::unique_ptr<FrameSeal> seal = nullptr);
  void SetHalf(std::unique_ptr<ConnHalf> half) { half_ = std::move(half); }
  ConnHalf* half() const { return half_.get(); }
  void Begin();

  // Thread-safe. On non-OK (connection closed) nothing was queued.
  Status EnqueueNotify(std::string message);
  // Thread-safe; closes from the loop thread.
  void CloseAsync(const Status& why);

 protected:
  Status OnHeader(const WireHeader& h, Sink* sink, std::uint64_t* follow) override;
  Status OnFrame(const WireHeader& h, std::string_view body) override;
  void OnClosed(const Status& why) override;
  bool AwaitingPeer() const override { return half_ != nullptr && half_->AwaitingPeer(); }
  Result<bool> FillPayload(OutFrame& frame) override;
  void OnFrameReleased(const OutFrame& frame) override;

 private:
  void DrainNotifies();

  Callbacks callbacks_;
  std::unique_ptr<ConnHalf> half_;  // Set before Begin(); then the loop thread's.
  Mutex mu_;
  std::vector<std::string> notifies_ SLUICE_GUARDED_BY(mu_);
  bool drain_scheduled_ SLUICE_GUARDED_BY(mu_) = false;
  bool closed_flag_ SLUICE_GUARDED_BY(mu_) = false;
  Status close_status_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_CONTROL_CLIENT_CONN_H_
