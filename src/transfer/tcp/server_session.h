// The target's side of one accepted connection: authenticates the initiator,
// then serves its reads and writes against this engine's region table. Every
// op is validated (key, bounds, access) before memory is touched; a write's
// payload is read straight into the region. Malformed input closes the
// connection with a logged reason; the engine goes on serving others.
#ifndef SLUICE_TRANSFER_TCP_SERVER_SESSION_H_
#define SLUICE_TRANSFER_TCP_SERVER_SESSION_H_

#include <array>
#include <functional>
#include <span>
#include <string>

#include "common/security_keys.h"
#include "device/backend.h"
#include "transfer/region_table.h"
#include "transfer/tcp/device_staging.h"
#include "transfer/tcp/frame_conn.h"

namespace sluice::internal {

class ServerSession;

// What a server session needs from its engine. Called on the loop thread.
class ServerHost {
 public:
  virtual ~ServerHost() = default;
  virtual RegionTableLocal& regions() = 0;
  virtual const std::string& secret() const = 0;
  // Whether every initiator must encrypt payload (EngineConfig::encrypt_data).
  virtual bool requires_encryption() const = 0;
  virtual std::uint64_t max_frame_payload() const = 0;
  virtual std::uint64_t max_notify_bytes() const = 0;
  virtual HelloOk MakeHelloOk() = 0;
  virtual void DeliverNotify(const std::string& sender, std::span<const std::byte> data) = 0;
  // The device backend of this engine's device regions (null: none), and
  // the most bytes one frame to or from device memory may carry (the size
  // of the session's staging slots).
  virtual device::DeviceBackend* device_backend() const = 0;
  virtual std::uint64_t staging_slot_size() const = 0;
  // Table pushes go to sessions that asked for them in their hello.
  virtual void Subscribe(const std::shared_ptr<ServerSession>& s) = 0;
  virtual void Unsubscribe(ServerSession* s) = 0;
  // How long an accepted connection may take to complete its handshake.
  virtual std::chrono::milliseconds handshake_timeout() const = 0;
  // Called once per session when its handshake ends (completed, refused,
  // timed out or closed): the host counts those in progress.
  virtual void HandshakeEnded() = 0;
  // Refused peers, logged at most once a second.
  virtual RefusalLog& refusals() = 0;
  // Payload bytes a peer's op read from this engine's memory or wrote to
  // it (TransportStats::bytes_served_*). Any loop thread.
  virtual void CountServed(std::uint64_t read, std::uint64_t written) = 0;
};

// ClientHello header `key` flags.
inline constexpr std::uint64_t kHelloWantsTable = 1;
// Encrypted payload, asked for (and bound into the session keys: a flag
// stripped in transit leaves the two ends unable to read each other).
inline constexpr std::uint64_t kHelloWantsEncryption = 2;

class ServerSession final : public FrameConn {
 public:
  static void Start(UniqueFd fd, EventLoop* loop, std::string peer,
                    std::chrono::milliseconds timeout, ServerHost* host);
  ServerSession(UniqueFd fd, EventLoop* loop, std::string peer, std::chrono::milliseconds timeout,
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
  // Tells the host this session's handshake is over (once).
  void EndHandshake();
  void Reject(StatusCode code, const std::string& reason);
  void SendStatus(FrameType type, std::uint64_t id, const Status& s);
  // The session's staging for an op of `len` bytes on a device region, made
  // at the first one. Errors: the backend's; kInvalidArgument when `len`
  // exceeds a slot (the initiator must slice finer).
  Status EnsureStaging(std::uint64_t len);

  ServerHost* host_;
  const Clock::time_point accepted_ = Clock::now();
  bool handshaking_ = true;  // Counted by the host until EndHandshake().
  bool ready_ = false;
  bool rejected_ = false;
  bool subscribed_ = false;
  std::array<std::uint8_t, kNonceBytes> nonce_{};
  std::string sender_;  // The initiator's endpoint, from its hello.
  // The write being received: its pinned region, or the reason it was refused.
  LocalRegion* write_region_ = nullptr;
  Status write_error_;
  char* write_device_dst_ = nullptr;  // A write into device memory: staged in recv_slot().
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<DeviceStaging> staging_;
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_TCP_SERVER_SESSION_H_
