// The transfer engine's target side as a live connection sees it: one
// engine in this process (tcp only, a shared secret, two registered
// regions), and per input a fresh loopback connection that sends the input
// either from its first byte (the handshake parser) or, after a valid
// handshake, as frames (header checks, write/read requests against a
// region, notifies). The engine must survive every input and keep
// accepting and handshaking.
// Every 8 bytes equal to kKeyPlaceholder ("SLUICEKY") become a region's
// key, so that seeds (fuzz/make_seeds.cc) reach the data path: after a
// handshake, the open region's; without one, the guarded region's -- which
// must never change: a connection that has not proved the secret changes
// no registered byte, even holding a valid key.
#include <sys/socket.h>
#include <unistd.h>

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
#include "transfer/tcp/handshake.h"

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
  if ((data[0] & 1) == 0) {
    auto c = ConnectTcp(target->hp, 1000ms);
    if (!c.ok()) {
      std::abort();  // The engine stopped accepting.
    }
    fd = std::move(*c);
  } else {
    auto h = ClientHandshake(target->hp, kSecret, "127.0.0.1:1", (data[0] & 2) != 0, 1000ms);
    if (!h.ok()) {
      std::abort();  // The engine stopped answering handshakes.
    }
    fd = std::move(h->fd);
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
