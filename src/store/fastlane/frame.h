// The master's fast lane: the hot metadata calls (put, get, lease release,
// exists, remove) as length-prefixed protobuf messages over one persistent
// TCP connection per concurrent caller. It carries the same request and
// response messages as the gRPC service and runs the same handlers; it
// exists because a gRPC unary call costs several thread hand-offs on each
// side (~150-200 us on a small host) where a blocking socket round trip
// costs one wake-up per side. Layout: docs/design/wire-protocol.md, "Master fast
// lane".
#ifndef SLUICE_STORE_FASTLANE_FRAME_H_
#define SLUICE_STORE_FASTLANE_FRAME_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/status.h"

#include "common/security_keys.h"

namespace sluice::internal::fastlane {

inline constexpr std::uint32_t kRequestMagic = 0x51464C53;   // "SLFQ" little-endian.
inline constexpr std::uint32_t kResponseMagic = 0x52464C53;  // "SLFR".
inline constexpr std::uint32_t kMaxRequestBody = 64 * 1024;  // Keys are <= 1 KiB.
inline constexpr std::uint32_t kMaxResponseBody = 4 * 1024 * 1024;
inline constexpr std::size_t kHeaderSize = 16;  // Requests' and responses'.

enum class Method : std::uint16_t {
  kPutStart = 1,
  kPutEnd = 2,
  kPutRevoke = 3,
  kGetStart = 4,
  kGetEnd = 5,
  kRemove = 6,
  kExists = 7,
  kWaitFor = 8,  // Parks on the master until the key commits or times out.
  kPutReserved = 9,
  kUnreserve = 10,
  // First on a connection to a master with a cluster credential; both
  // ends prove the lane key (HelloProof). The body is the client's nonce
  // then its proof; the master answers OK with its own proof, or
  // kUnauthenticated and closes the connection. Handled by the lane itself.
  kHello = 11,
};
inline constexpr std::uint16_t kMaxMethod = 11;

// The server's first frame on every connection, before any request: a
// response header with code OK and a body of kChallengeBytes random bytes.
inline constexpr std::size_t kChallengeBytes = 32;
// A Hello's body: the client's nonce, then its proof.
inline constexpr std::size_t kHelloBytes = kChallengeBytes + 32;

// HMAC-SHA256(lane key, label || master nonce || client nonce), where the
// label ("sluice fast lane client" or "... master") keeps one side's proof
// from serving as the other's.
std::array<std::uint8_t, 32> HelloProof(std::string_view key, bool from_master,
                                        std::string_view master_nonce,
                                        std::string_view client_nonce);

// After a keyed Hello, every frame either way (requests, answers) carries
// kMacBytes after its body (not counted in body_len): the first 16 bytes of
// HMAC-SHA256(direction's key, frame number || header || body). The frame
// number counts a direction's frames from 0 and is never sent, so a frame
// altered, replayed, dropped or injected on the network fails.
inline constexpr std::size_t kMacBytes = 16;
using FrameMac = std::array<std::uint8_t, kMacBytes>;

// One direction's MACs. Inactive (default-constructed): frames carry none.
// Not thread-safe.
class LaneMac {
 public:
  LaneMac() = default;
  // The key of the master-bound (`to_master`) or client-bound direction of
  // the connection whose Hello used these nonces.
  LaneMac(std::string_view lane_key, bool to_master, std::string_view master_nonce,
          std::string_view client_nonce);
  bool active() const { return keyed_; }
  // The next frame's MAC (advancing the frame number).
  FrameMac Next(const std::byte head[kHeaderSize], std::string_view body);
  // Whether `mac` is the next frame's (advancing the frame number).
  bool CheckNext(const std::byte head[kHeaderSize], std::string_view body, const FrameMac& mac);

 private:
  bool keyed_ = false;  // A key failed in OpenSSL yields MACs that match none.
  KeyedHmac mac_;
  std::uint64_t next_ = 0;
};

// Request flag: the caller reads no answer (the server sends none).
inline constexpr std::uint16_t kFlagOneWay = 1;

// 16 bytes, little-endian, then `body_len` bytes of the serialized request.
struct RequestHeader {
  std::uint32_t magic = kRequestMagic;
  std::uint32_t body_len = 0;
  std::uint16_t method = 0;
  std::uint16_t flags = 0;
  std::uint32_t reserved = 0;  // Zero.
};
// 16 bytes, then `body_len` bytes: the serialized response when `code` is
// OK, else the error message (UTF-8).
struct ResponseHeader {
  std::uint32_t magic = kResponseMagic;
  std::uint32_t body_len = 0;
  std::uint8_t code = 0;   // sluice::StatusCode.
  std::uint8_t scope = 0;  // sluice::FailureScope.
  std::uint16_t reserved0 = 0;
  std::uint32_t reserved1 = 0;
};

void Encode(const RequestHeader& h, std::byte out[kHeaderSize]);
void Encode(const ResponseHeader& h, std::byte out[kHeaderSize]);
// Errors: kInvalidArgument naming the bad field (magic, length, method,
// flags, reserved bits).
Result<RequestHeader> DecodeRequest(const std::byte in[kHeaderSize]);
Result<ResponseHeader> DecodeResponse(const std::byte in[kHeaderSize]);

const char* MethodName(Method m);

// Writes a header, its body and (when `mac` is active) the body's MAC
// with one sendmsg (finishing a short write with plain sends) on a blocking
// socket. Errors carry scope kEndpoint.
Status SendHeaderAndBody(int fd, const std::byte head[kHeaderSize], std::string_view body,
                         LaneMac* mac = nullptr);

}  // namespace sluice::internal::fastlane

#endif  // SLUICE_STORE_FASTLANE_FRAME_H_
