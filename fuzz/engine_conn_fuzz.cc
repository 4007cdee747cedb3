// The transfer engine's target side as a live connection sees it: one
// engine in this process (tcp only, a shared secret, two registered
// regions), and per input a fresh loopback connection that sends the input
// either from its first byte (the handshake parser) or, after a valid
// handshake, as frames (header checks, write/read requests against a
// region, notifies). After a handshake the input's frames are sealed as a
// client would seal them (frame_seal.h; with mode bit 3 their payload
// encrypted too), so that the parser behind the seal is reached; mode bit
// 2 sends them unsealed instead (the seal's refusal). The engine must
// survive every input and keep accepting and handshaking.
// Every 8 bytes equal to kKeyPlaceholder ("SLUICEKY") become a region's
// key, so that seeds (fuzz/make_seeds.cc) reach the data path: after a
// handshake, the open region's; without one, the guarded region's -- which
// must never change: a connection that has not proved the secret changes
// no registered byte, even holding a valid key.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "sluice/transfer/engine.h"

#include "common/net.h"
#include "loopback.h"
#include "transfer/control/handshake.h"
#include "transfer/frame_seal.h"

namespace {

using namespace sluice;
using namespace sluice::internal;
using namespace std::chrono_literals;

constexpr char kKeyPlaceholder[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'K', 'Y'};

constexpr char kSecret[] = "fuzz-secret";
constexpr char kGuardByte = 0x5a;

struct Target {
  std::unique_ptr<TransferEngine> engine;
  std::vector<char> region = std::vector<char>(1 << 20);
  std::vector<char> guarded = std::vector<char>(64 << 10, kGuardByte);
  std::uint64_t key = 0, guarded_key = 0;
  HostPort hp;
};

Target* MakeTarget() {
  auto* t = new Target;  // Deleted at exit.
  EngineConfig c;
  c.transports = {"tcp"};
  c.io_threads = 1;
  c.secret = kSecret;
  auto e = TransferEngine::Create(c);
  if (!e.ok()) {
    std::abort();
  }
  t->engine = std::move(*e);
  auto key = t->engine->RegisterMemory(t->region.data(), t->region.size(), MemoryKind::kHost,
                                       Access::kRemoteReadWrite);
  auto guarded = t->engine->RegisterMemory(t->guarded.data(), t->guarded.size(), MemoryKind::kHost,
                                           Access::kRemoteReadWrite);
  auto hp = ParseHostPort(t->engine->endpoint(), false);
  if (!key.ok() || !guarded.ok() || !hp.ok()) {
    std::abort();
  }
  t->key = key->value;
  t->guarded_key = guarded->value;
  t->hp = *hp;
  return t;
}

Target* target = nullptr;

// `bytes` cut into frames (a header, then the bytes its length says follow
// it, as far as there are bytes), each with its seal after the header.
std::vector<char> Sealed(const std::vector<char>& bytes, FrameSeal& seal) {
  std::vector<char> out;
  std::vector<char> cipher;
  std::size_t at = 0;
  while (bytes.size() - at >= sizeof(WireHeader)) {
    WireHeader h;
    std::memcpy(&h, bytes.data() + at, sizeof(h));
    at += sizeof(h);
    const std::size_t follow =
        static_cast<FrameType>(h.type) == FrameType::kReadReq
            ? 0
            : static_cast<std::size_t>(std::min<std::uint64_t>(h.length, bytes.size() - at));
    const char* p = bytes.data() + at;
    at += follow;
    const bool payload = CarriesPayload(h);
    cipher.assign(p, p + follow);
    std::uint8_t s[FrameSeal::kMaxSealBytes];
    if (!seal.Seal(h, payload ? std::string_view() : std::string_view(p, follow), p, cipher.data(),
                   follow, s)
             .ok()) {
      std::abort();
    }
    const char* hp = reinterpret_cast<const char*>(&h);
    out.insert(out.end(), hp, hp + sizeof(h));
    out.insert(out.end(), reinterpret_cast<const char*>(s),
               reinterpret_cast<const char*>(s) + seal.bytes());
    const char* sent = payload && seal.encrypts() ? cipher.data() : p;
    out.insert(out.end(), sent, sent + follow);
  }
  out.insert(out.end(), bytes.begin() + static_cast<std::ptrdiff_t>(at), bytes.end());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  target = MakeTarget();
  fuzz::DeleteAtExit(target);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  UniqueFd fd;
  std::unique_ptr<FrameSeal> seal;
  if ((data[0] & 1) == 0) {
    auto c = ConnectTcp(target->hp, 1000ms);
    if (!c.ok()) {
      std::abort();  // The engine stopped accepting.
    }
    fd = std::move(*c);
  } else {
    auto h = ClientHandshake(target->hp, kSecret, "127.0.0.1:1", (data[0] & 2) != 0,
                             (data[0] & 8) != 0, 1000ms);
    if (!h.ok()) {
      std::abort();  // The engine stopped answering handshakes.
    }
    fd = std::move(h->fd);
    seal = std::move(h->seal);
    (void)SetNonBlocking(fd.get(), false);
  }
  const bool handshaken = (data[0] & 1) != 0;
  const std::uint64_t key = handshaken ? target->key : target->guarded_key;
  std::vector<char> bytes(reinterpret_cast<const char*>(data) + 1,
                          reinterpret_cast<const char*>(data) + size);
  for (std::size_t i = 0; i + sizeof(kKeyPlaceholder) <= bytes.size(); ++i) {
    if (std::memcmp(bytes.data() + i, kKeyPlaceholder, sizeof(kKeyPlaceholder)) == 0) {
      std::memcpy(bytes.data() + i, &key, sizeof(key));
    }
  }
  if (seal != nullptr && (data[0] & 4) == 0) {
    bytes = Sealed(bytes, *seal);
  }
  (void)SetIoTimeout(fd.get(), 200ms);
  (void)SendAll(fd.get(), bytes.data(), bytes.size());
  ::shutdown(fd.get(), SHUT_WR);
  (void)fuzz::DrainAnswer(fd.get(), 20);
  for (char b : target->guarded) {
    if (b != kGuardByte) {
      std::abort();  // Written without the secret.
    }
  }
  return 0;
}
