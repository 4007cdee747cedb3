// The initiator's half of the handshake, done with blocking I/O on a fresh
// socket before the socket joins an event loop (see wire.h for the frames).
#ifndef SLUICE_TRANSFER_CONTROL_HANDSHAKE_H_
#define SLUICE_TRANSFER_CONTROL_HANDSHAKE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/net.h"
#include "transfer/frame_seal.h"
#include "transfer/wire.h"

namespace sluice::internal {

// ClientHello header `key` flags.
inline constexpr std::uint64_t kHelloWantsTable = 1;
// Encrypted payload, asked for (and bound into the session keys: a flag
// stripped in transit leaves the two ends unable to read each other).
inline constexpr std::uint64_t kHelloWantsEncryption = 2;

struct HandshakeResult {
  UniqueFd fd;  // Non-blocking, ready for a ClientConn.
  HelloOk hello;
  std::unique_ptr<FrameSeal> seal;  // The session's, with a secret; else null.
};

// Connects to `peer`, proves knowledge of `secret`, and returns the peer's
// host info and region table. `wants_table` subscribes this connection to
// table pushes; `encrypt` asks for encrypted payload (needs a secret).
// Errors: kUnavailable / kDeadlineExceeded (scope kEndpoint); the peer's
// rejection code (kPermissionDenied for a wrong secret, kFailedPrecondition
// for a protocol version mismatch or a target that requires encryption)
// with its reason.
Result<HandshakeResult> ClientHandshake(const HostPort& peer, const std::string& secret,
                                        const std::string& self_endpoint, bool wants_table,
                                        bool encrypt, std::chrono::milliseconds timeout);

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_CONTROL_HANDSHAKE_H_
