// The transfer engine's handshake and control-frame bodies, as a peer sends
// them: ClientHello (the target's side), HelloOk and region-table pushes
// (the initiator's side). A body that decodes must encode back to one that
// decodes to the same thing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "transfer/wire.h"

namespace {

using namespace sluice::internal;

bool SameTable(const RegionTable& a, const RegionTable& b) {
  if (a.version != b.version || a.regions.size() != b.regions.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.regions.size(); ++i) {
    const WireRegion& x = a.regions[i];
    const WireRegion& y = b.regions[i];
    if (x.info.key.value != y.info.key.value || x.info.length != y.info.length ||
        x.memfd != y.memfd || x.memfd_size != y.memfd_size || x.memfd_inode != y.memfd_inode) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  // The first byte picks the frame; the rest is its body.
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      auto hello = DecodeClientHello(body);
      if (hello.ok()) {
        auto again = DecodeClientHello(EncodeClientHello(*hello));
        if (!again.ok() || again->endpoint != hello->endpoint || again->mac != hello->mac ||
            again->host.boot_id != hello->host.boot_id || again->host.pid != hello->host.pid) {
          std::abort();
        }
      }
      break;
    }
    case 1: {
      auto ok = DecodeHelloOk(body);
      if (ok.ok()) {
        auto again = DecodeHelloOk(EncodeHelloOk(*ok));
        if (!again.ok() || !SameTable(again->table, ok->table)) {
          std::abort();
        }
      }
      break;
    }
    default: {
      auto table = DecodeTable(body);
      if (table.ok()) {
        auto again = DecodeTable(EncodeTable(*table));
        if (!again.ok() || !SameTable(*again, *table)) {
          std::abort();
        }
      }
      break;
    }
  }
  return 0;
}
