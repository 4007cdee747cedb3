// Integrity (and optionally secrecy) of the frames after a handshake. With a
// secret, every frame after the hello carries a seal right after its 40-byte
// header: a 16-byte MAC, then (with payload encryption) the payload's 16-byte
// AES-256-GCM tag.
//
//   MAC = HMAC-SHA256(direction's MAC key,
//                     frame number || header || tag (if any) || body)[0:16]
//
// The frame number counts the frames of one direction from 0 and never
// travels: a dropped, replayed, reordered or injected frame fails its MAC.
// The MAC covers a frame's body (errors, acks' messages, notifies, table
// pushes) but not bulk payload (a write's, a successful read's: see
// CarriesPayload), which lands in place before the frame ends and is checked
// only when encrypted: its header (key, offset, length) is checked before a
// byte of it lands. Encrypted payload uses the frame number as its IV and
// the header as associated data.
//
// Keys come from the shared secret, both handshake nonces and the
// client's encryption choice (so stripping that choice in transit leaves
// the two ends with different keys), one set per direction.
#ifndef SLUICE_TRANSFER_FRAME_SEAL_H_
#define SLUICE_TRANSFER_FRAME_SEAL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>

#include "sluice/status.h"

#include "common/security_keys.h"
#include "transfer/wire.h"

struct evp_cipher_ctx_st;

namespace sluice::internal {

// Whether the bytes after `h` are bulk payload (landed in place, outside the
// MAC) rather than a body: a write request's, and a successful read
// response's.
inline bool CarriesPayload(const WireHeader& h) {
  const auto type = static_cast<FrameType>(h.type);
  return type == FrameType::kWriteReq || (type == FrameType::kReadResp && h.status == 0);
}

class FrameSeal {
 public:
  static constexpr std::size_t kMacBytes = 16;
  static constexpr std::size_t kTagBytes = 16;
  static constexpr std::size_t kMaxSealBytes = kMacBytes + kTagBytes;

  // The seal of one end of a connection: `initiator` is the client side.
  // `secret` must not be empty. Errors: kInternal (OpenSSL).
  static Result<std::unique_ptr<FrameSeal>> Create(
      std::string_view secret, const std::array<std::uint8_t, kNonceBytes>& server_nonce,
      const std::array<std::uint8_t, kNonceBytes>& client_nonce, bool encrypt, bool initiator);
  ~FrameSeal();
  FrameSeal(const FrameSeal&) = delete;
  FrameSeal& operator=(const FrameSeal&) = delete;

  bool encrypts() const { return encrypt_; }
  // Seal bytes after each header: kMacBytes, plus kTagBytes when encrypting.
  std::size_t bytes() const { return encrypt_ ? kMaxSealBytes : kMacBytes; }

  // Seals the next outgoing frame into `seal` (bytes() long). When
  // encrypting a frame that carries payload, first encrypts `payload_len`
  // bytes of `payload` into `cipher` (which may be `payload` itself; it is
  // what goes on the wire). `body` is the frame's body (empty for payload
  // frames). Not thread-safe: one loop. Errors: kInternal (OpenSSL).
  Status Seal(const WireHeader& h, std::string_view body, const char* payload, char* cipher,
              std::uint64_t payload_len, std::uint8_t* seal);

  // Checks the next incoming frame's MAC over its header, seal and `body`
  // (empty for payload frames) and answers its frame number, for
  // OpenPayload. Errors: kPermissionDenied (the frame is not the peer's).
  Result<std::uint64_t> Check(const WireHeader& h, const std::uint8_t* seal, std::string_view body);

  // Decrypts the payload of frame `number` (checked) in place and checks its
  // tag. Errors: kPermissionDenied (altered in transit: the bytes at
  // `payload` are then not the sender's).
  Status OpenPayload(std::uint64_t number, const WireHeader& h, const std::uint8_t* seal,
                     char* payload, std::uint64_t len);

 private:
  struct Direction {
    KeyedHmac mac;
    evp_cipher_ctx_st* aead = nullptr;
    std::uint64_t next = 0;  // Frame number of the next frame.
  };
  explicit FrameSeal(bool encrypt) : encrypt_(encrypt) {}
  Status Mac(Direction& d, std::uint64_t number, const WireHeader& h, const std::uint8_t* tag,
             std::string_view body, std::uint8_t* out);

  const bool encrypt_;
  Direction out_, in_;
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_FRAME_SEAL_H_
