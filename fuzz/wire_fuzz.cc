// The transfer engine's handshake and control-frame bodies, as a peer sends
// them: ClientHello (the target's side), HelloOk and region-table pushes
// (the initiator's side), with their transports' blobs. A body that decodes must encode back to one
// that decodes to the same thing in every field, and re-encodes to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "transfer/wire.h"

namespace {

using namespace sluice::internal;

// Every field, so a field that decoding drops or mangles fails the round
// trip (not only the ones the engine reads first).
bool SameHost(const HostInfo& a, const HostInfo& b) {
  return a.boot_id == b.boot_id && a.pid_ns == b.pid_ns && a.pid == b.pid &&
         a.probe_addr == b.probe_addr && a.probe == b.probe && a.host_id == b.host_id;
}

bool SameRegion(const WireRegion& x, const WireRegion& y) {
  const sluice::RegionInfo& a = x.info;
  const sluice::RegionInfo& b = y.info;
  return a.key.value == b.key.value && a.addr == b.addr && a.length == b.length &&
         a.kind == b.kind && a.access == b.access && a.shared == b.shared && a.device == b.device &&
         x.access == y.access;  // Every transport's blob, name and bytes.
}

bool SameTable(const RegionTable& a, const RegionTable& b) {
  if (a.version != b.version || a.regions.size() != b.regions.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.regions.size(); ++i) {
    if (!SameRegion(a.regions[i], b.regions[i])) {
      return false;
    }
  }
  return true;
}

// Decode(body) = v; then Encode(v) must decode to a value equal to v in
// every field, and encoding that again must give the same bytes.
template <typename T, typename Decode, typename Encode, typename Same>
void RoundTrip(std::string_view body, Decode decode, Encode encode, Same same) {
  auto v = decode(body);
  if (!v.ok()) {
    return;
  }
  const std::string bytes = encode(*v);
  auto again = decode(bytes);
  if (!again.ok() || !same(*v, *again) || encode(*again) != bytes) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  // The first byte picks the frame; the rest is its body.
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      RoundTrip<ClientHello>(body, DecodeClientHello, EncodeClientHello,
                             [](const ClientHello& a, const ClientHello& b) {
                               return a.mac == b.mac && a.endpoint == b.endpoint &&
                                      SameHost(a.host, b.host);
                             });
      break;
    case 1:
      RoundTrip<HelloOk>(
          body, DecodeHelloOk, EncodeHelloOk, [](const HelloOk& a, const HelloOk& b) {
            return SameHost(a.host, b.host) && SameTable(a.table, b.table) && a.links == b.links;
          });
      break;
    default:
      RoundTrip<RegionTable>(body, DecodeTable, EncodeTable, SameTable);
      break;
  }
  return 0;
}
