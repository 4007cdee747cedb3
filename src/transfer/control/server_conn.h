// The target's side of one accepted control-plane connection: authenticates
// the initiator (the handshake), pushes this engine's region table to
// connections that asked for it and delivers the initiator's notifies. The
// frames of the transports served on connections (tcp's reads and writes)
// go to their halves (conn_half.h). Malformed input closes the connection
// with a logged reason; the engine goes on serving others.
#ifndef SLUICE_TRANSFER_CONTROL_SERVER_CONN_H_
#define SLUICE_TRANSFER_CONTROL_SERVER_CONN_H_

#include <array>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/security_keys.h"
#include "transfer/control/conn_half.h"
#include "transfer/control/frame_conn.h"

namespace sluice::internal {

class ServerConn;

// What a server connection needs from its engine. Called on the loop thread.
class ServerHost {
 public:
  virtual ~ServerHost() = default;
  virtual const std::string& secret() const = 0;
  // Whether every initiator must encrypt payload (EngineConfig::encrypt_data).
  virtual bool requires_encryption() const = 0;
  virtual std::uint64_t max_notify_bytes() const = 0;
  virtual HelloOk MakeHelloOk() = 0;
  virtual void DeliverNotify(const std::string& sender, std::span<const std::byte> data) = 0;
  // Table pushes go to connections that asked for them in their hello.
  virtual void Subscribe(const std::shared_ptr<ServerConn>& c) = 0;
  virtual void Unsubscribe(ServerConn* c) = 0;
  // How long an accepted connection may take to complete its handshake.
  virtual std::chrono::milliseconds handshake_timeout() const = 0;
  // Called once per connection when its handshake ends (completed,
  // refused, timed out or closed): the host counts those in progress.
  virtual void HandshakeEnded() = 0;
  // Refused peers, logged at most once a second.
  virtual RefusalLog& refusals() = 0;
  // The halves of the transports served on this connection, made when
  // its handshake completes.
  virtual std::vector<std::unique_ptr<ConnHalf>> ServedHalves(ConnPort* conn) = 0;
};

class ServerConn final : public ControlConn {
 public:
  static void Start(UniqueFd fd, EventLoop* loop, std::string peer,
                    std::chrono::milliseconds timeout, ServerHost* host);
  ServerConn(UniqueFd fd, EventLoop* loop, std::string peer, std::chrono::milliseconds timeout,
             ServerHost* host);

  // Thread-safe: queues a table push on the loop thread.
  void PushTable(std::shared_ptr<const std::string> encoded);

  // The handshake deadline (host's handshake_timeout from the accept),
  // then FrameConn's progress timeout.
  void OnTick(Clock::time_point now) override;

 protected:
  Status OnHeader(const WireHeader& h, Sink* sink, std::uint64_t* follow) override;
  Status OnFrame(const WireHeader& h, std::string_view body) override;
  void OnClosed(const Status& why) override;
  bool AwaitingPeer() const override { return false; }
  void OnFrameReleased(const OutFrame& frame) override;
  Result<bool> FillPayload(OutFrame& frame) override;

 private:
  void SendHello();
  Status OnClientHello(const WireHeader& h, std::string_view body);
  // Tells the host this connection's handshake is over (once).
  void EndHandshake();
  void Reject(StatusCode code, const std::string& reason);
  ConnHalf* Owner(const OutFrame& frame) const;

  ServerHost* host_;
  const Clock::time_point accepted_ = Clock::now();
  bool handshaking_ = true;  // Counted by the host until EndHandshake().
  bool ready_ = false;
  bool rejected_ = false;
  bool subscribed_ = false;
  std::array<std::uint8_t, kNonceBytes> nonce_{};
  std::string sender_;                             // The initiator's endpoint, from its hello.
  std::vector<std::unique_ptr<ConnHalf>> halves_;  // Made once the handshake completes.
  ConnHalf* current_ = nullptr;                    // The half whose frame is arriving.
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_CONTROL_SERVER_CONN_H_
