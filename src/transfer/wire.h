// The engine's wire protocol (see docs/design/wire-protocol.md). Every frame starts
// with a fixed 40-byte header in little-endian byte order; `length` says how
// many bytes follow it (payload or body, by type). Handshake (each side
// proves the secret to the other, over everything it says about itself):
//   server -> kServerHello (body: 32-byte nonce)
//   client -> kClientHello (body: MAC, client nonce, endpoint, host info)
//   server -> kHelloOk (body: MAC, host info, region table, link blobs)
//             | kError (body: reason), then close
// With a secret, every later frame carries a seal after its header
// (frame_seal.h: a MAC, and the payload's tag when encrypted).
// Data (client = initiator, server = target; responses come back in order):
//   kWriteReq (key, offset, length + payload)  -> kWriteAck (status [+ message])
//   kReadReq  (key, offset, length)            -> kReadResp (status, payload | message)
//   kNotify   (length + payload), no reply
//   server -> kTableUpdate (body: region table) whenever the table changes.
#ifndef SLUICE_TRANSFER_WIRE_H_
#define SLUICE_TRANSFER_WIRE_H_

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"
#include "sluice/transfer/engine.h"

#include "common/random.h"

namespace sluice::internal {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian; add byte swaps for this target");

inline constexpr std::uint32_t kWireMagic = 0x31554C53;  // "SLU1"
// 2: regions carry their device and, for exported device memory, an IPC
// handle (engines of versions 1 and 2 refuse each other's hello by name).
// 3: the hello's host carries the host id (SetHostId).
// 4: mutual proof: the client hello carries a nonce of its own and the
// hello-ok a MAC (ClientHelloMac, HelloOkMac), each over the whole body.
// 5: with a secret, every frame after the hello carries a seal
// (frame_seal.h), and a client may ask for encrypted payload.
// 6: what a peer needs to reach a region, or the engine, through one
// transport is that transport's own opaque blob (AccessBlob): a region
// carries one per transport that published one, the hello-ok one per
// transport with link information. No transport's fields are in the
// format any more, so adding a transport changes no version.
inline constexpr std::uint8_t kWireVersion = 6;
inline constexpr std::size_t kMaxControlBody = 1 << 20;  // Hello, table, error.
inline constexpr std::size_t kNonceBytes = 32;

enum class FrameType : std::uint8_t {
  kServerHello = 1,
  kClientHello = 2,
  kHelloOk = 3,
  kError = 4,
  kWriteReq = 5,
  kWriteAck = 6,
  kReadReq = 7,
  kReadResp = 8,
  kNotify = 9,
  kTableUpdate = 10,
};

struct WireHeader {
  std::uint32_t magic = kWireMagic;
  std::uint8_t version = kWireVersion;
  std::uint8_t type = 0;
  std::uint16_t status = 0;  // StatusCode of a response.
  std::uint64_t request_id = 0;
  std::uint64_t key = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;  // Bytes following (for kReadReq: bytes asked).
};
static_assert(sizeof(WireHeader) == 40);

// Identity of a host/process, used to decide whether shm can reach a peer.
struct HostInfo {
  std::string boot_id;       // /proc/sys/kernel/random/boot_id
  std::uint64_t pid_ns = 0;  // inode of /proc/self/ns/pid
  std::int32_t pid = 0;
  std::uint64_t probe_addr = 0;  // Address of `probe` in the owner's memory.
  std::array<std::uint8_t, 16> probe{};
  std::string host_id;  // SetHostId / SLUICE_HOST_ID; empty: none.

  // This process (its host id fixed at the first call).
  static const HostInfo& Self();
  // Whether memory can be shared with `peer` directly: the same kernel boot
  // and host id, and with no host id the same pid namespace.
  bool SameHostAs(const HostInfo& peer) const;
};

// The host id SLUICE_HOST_ID names, if valid. Errors: kInvalidArgument
// naming the variable.
Status CheckHostIdEnvironment();

// One transport's remote-access information, packed and read only by that
// transport (Transport::PackRegion, Transport::LinkBlob): a name of 1..16
// characters [a-z0-9_-] and at most kMaxAccessBlob bytes (kMaxLinkBlob for
// a link's). The engine moves them and reads none.
struct AccessBlob {
  std::string transport;
  std::string bytes;

  bool operator==(const AccessBlob&) const = default;
};
inline constexpr std::size_t kMaxTransportName = 16;
inline constexpr std::size_t kMaxAccessBlob = 4096;
inline constexpr std::size_t kMaxLinkBlob = 65536;
inline constexpr std::size_t kMaxAccessBlobs = 8;  // Per region or hello; names distinct.

// The blob named `transport` in `blobs`, or null.
const std::string* FindBlob(const std::vector<AccessBlob>& blobs, std::string_view transport);

// A published region, with what each transport publishes for a peer to
// reach it (a same-host mapping, an exported device handle, a remote key).
struct WireRegion {
  RegionInfo info;
  std::vector<AccessBlob> access;

  const std::string* Blob(std::string_view transport) const { return FindBlob(access, transport); }
};

struct RegionTable {
  std::uint64_t version = 0;
  std::vector<WireRegion> regions;
};

struct ClientHello {
  std::array<std::uint8_t, 32> mac{};                    // ClientHelloMac.
  std::array<std::uint8_t, kNonceBytes> client_nonce{};  // The server's challenge.
  std::string endpoint;  // The initiator's own endpoint, for notify senders.
  HostInfo host;
};

struct HelloOk {
  std::array<std::uint8_t, 32> mac{};  // HelloOkMac.
  HostInfo host;
  RegionTable table;
  std::vector<AccessBlob> links;  // Per transport: what opens a path to this engine.
};

std::string EncodeClientHello(const ClientHello& hello);
Result<ClientHello> DecodeClientHello(std::string_view body);
std::string EncodeHelloOk(const HelloOk& ok);
Result<HelloOk> DecodeHelloOk(std::string_view body);
std::string EncodeTable(const RegionTable& table);
Result<RegionTable> DecodeTable(std::string_view body);

// The client's proof: HMAC-SHA256(secret, "sluice-client-hello" || server
// nonce || the hello encoded with a zero MAC), so its host claims (which
// decide same-host access) are under it. All zeros when `secret` is empty.
std::array<std::uint8_t, 32> ClientHelloMac(std::string_view secret,
                                            const std::array<std::uint8_t, kNonceBytes>& nonce,
                                            const ClientHello& hello);
// The server's proof: HMAC-SHA256(secret, "sluice-hello-ok" || server nonce
// || client nonce || the hello-ok encoded with a zero MAC), over its host
// info and region table: a client with a secret trusts neither before it
// checks this. All zeros when `secret` is empty.
std::array<std::uint8_t, 32> HelloOkMac(std::string_view secret,
                                        const std::array<std::uint8_t, kNonceBytes>& server_nonce,
                                        const std::array<std::uint8_t, kNonceBytes>& client_nonce,
                                        const HelloOk& ok);
// Constant-time comparison of two MACs.
bool MacEquals(const std::array<std::uint8_t, 32>& a, const std::array<std::uint8_t, 32>& b);

inline WireHeader MakeHeader(FrameType type, std::uint64_t request_id, std::uint64_t length) {
  WireHeader h;
  h.type = static_cast<std::uint8_t>(type);
  h.request_id = request_id;
  h.length = length;
  return h;
}

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_WIRE_H_
