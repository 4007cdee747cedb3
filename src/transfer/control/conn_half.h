// A transport's half of one control-plane connection. The control plane
// (this directory) opens the pooled connections to a peer and runs the
// handshake, region-table pushes and notifies on them; a transport that
// carries its ops on those same connections (tcp) claims the frame types
// of its ops and gets, per connection, the hooks FrameConn gives a
// subclass for them (frame_conn.h), on the connection's loop thread.
//
// An initiator's connection has at most one half (its engine's transport
// that rides connections: Transport::ClientHalf); a target's connection
// has one per transport served on connections (TransportFactory::serve),
// whatever the target itself initiates with.
#ifndef SLUICE_TRANSFER_CONTROL_CONN_HALF_H_
#define SLUICE_TRANSFER_CONTROL_CONN_HALF_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "sluice/status.h"

#include "transfer/control/frame_conn.h"
#include "transfer/wire.h"

namespace sluice::internal {

// What a half may do with its connection.
class ConnPort {
 public:
  virtual ~ConnPort() = default;
  virtual const std::string& peer() const = 0;
  // Loop thread: whether the connection closed; queue a frame (written by
  // Flush, in order with the control plane's own frames).
  virtual bool closed() const = 0;
  virtual void Queue(FrameConn::OutFrame frame) = 0;
  virtual void Flush() = 0;
  void Send(FrameConn::OutFrame frame) {
    Queue(std::move(frame));
    Flush();
  }
  // Any thread: runs `fn` on the loop thread, unless the connection is
  // gone by then.
  virtual void Post(std::function<void()> fn) = 0;
};

// A control-plane connection (ClientConn, ServerConn): a FrameConn whose
// halves reach it through ConnPort.
class ControlConn : public FrameConn, public ConnPort {
 public:
  using FrameConn::FrameConn;

  const std::string& peer() const override { return FrameConn::peer(); }
  bool closed() const override { return FrameConn::closed(); }
  void Queue(OutFrame frame) override { FrameConn::Queue(std::move(frame)); }
  void Flush() override { FrameConn::Flush(); }
  void Post(std::function<void()> fn) override {
    loop()->Post([w = std::weak_ptr<FrameConn>(shared_from_this()), fn = std::move(fn)] {
      if (auto s = w.lock()) {
        fn();
      }
    });
  }
};

class ConnHalf {
 public:
  virtual ~ConnHalf() = default;

  // Whether frames of `type` are this half's (its requests or responses).
  virtual bool Claims(FrameType type) const = 0;
  // FrameConn's hooks, for the frames it claims (OnHeader, OnFrame), for
  // the frames it queued (FillPayload, OnFrameReleased: also called for
  // the control plane's own frames, which carry no cookie and are never
  // staged), and for the connection (AwaitingPeer, OnClosed).
  virtual Status OnHeader(const WireHeader& h, FrameConn::Sink* sink, std::uint64_t* follow) = 0;
  virtual Status OnFrame(const WireHeader& h, std::string_view body) = 0;
  virtual bool AwaitingPeer() const { return false; }
  virtual Result<bool> FillPayload(FrameConn::OutFrame& /*frame*/) { return true; }
  virtual void OnFrameReleased(const FrameConn::OutFrame& /*frame*/) {}
  // The connection closed (once): fail pending work with `failure` (for
  // an initiator's connection, an endpoint-scope error naming the peer).
  virtual void OnClosed(const Status& failure) = 0;
};

// The status a target's error frame or failed response carries (`h.status`,
// its message in `body`), as the initiator reports it: request scope,
// naming `peer`; an unknown code reads as kInternal.
Status PeerError(const std::string& peer, const WireHeader& h, std::string_view body);

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_CONTROL_CONN_HALF_H_
