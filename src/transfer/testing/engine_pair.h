// Test scaffolding: a target and an initiator engine in one process, joined
// over loopback, configured for one transport mode, and buffers of host or
// (sim) device memory that tests fill and check only through their methods.
// Used by the conformance suite every transport passes and by the
// integration tests.
#ifndef SLUICE_TRANSFER_TESTING_ENGINE_PAIR_H_
#define SLUICE_TRANSFER_TESTING_ENGINE_PAIR_H_

#include <cstddef>
#include <memory>
#include <string>

#include "sluice/transfer/engine.h"

namespace sluice::testing {

// kTcp: the initiator may only use tcp. kShmMapped / kShmVm: it may only use
// shm, with target memory from AllocateShared (mapped) or plain memory
// (process_vm_readv/writev). kDevipc: both engines have the sim device
// backend and the initiator may use shm and devipc (target host memory is
// shared, so devipc maps it). kTcpStaged: both engines have the sim backend
// without device IPC and the initiator may only use tcp, so device memory
// at either end goes through the connections' pinned staging slots.
// kTcpSealed / kTcpStagedSealed: kTcp / kTcpStaged with a shared secret and
// encrypted payload (every frame sealed, frame_seal.h). kUcxTcp / kUcxShm:
// the initiator may only use ucx, with UCX's tcp transport (UCX_TLS=tcp)
// or its shared-memory ones (UCX_TLS=sm), set in the process's
// environment when the pair is made (SLUICE_TEST_UCX_TLS, when set, is
// used for both instead).
enum class Mode {
  kTcp,
  kShmMapped,
  kShmVm,
  kDevipc,
  kTcpStaged,
  kTcpSealed,
  kTcpStagedSealed,
  kUcxTcp,
  kUcxShm,
};
// Whether the initiator of `m` may only use tcp.
inline bool TcpOnly(Mode m) {
  return m == Mode::kTcp || m == Mode::kTcpStaged || m == Mode::kTcpSealed ||
         m == Mode::kTcpStagedSealed;
}
std::string ModeName(Mode m);
// The one transport the initiator of `m` moves bytes with.
std::string ModeTransport(Mode m);

// The largest payload the size sweeps (1 byte up) move: 256 MiB in the
// Release stage; 64 MiB under AddressSanitizer and 32 MiB under
// ThreadSanitizer, whose instrumented copies and pattern checks take
// minutes per case over 256 MiB on two cores. A race or a bad access does
// not depend on the size once a payload spans many of a transport's chunks
// and staging slots, which 32 MiB does.
// (GCC says __SANITIZE_THREAD__ / __SANITIZE_ADDRESS__; Clang,
// __has_feature(thread_sanitizer) / __has_feature(address_sanitizer).)
#if defined(__has_feature)
#define SLUICE_TESTING_HAS_TSAN __has_feature(thread_sanitizer)
#define SLUICE_TESTING_HAS_ASAN __has_feature(address_sanitizer)
#else
#define SLUICE_TESTING_HAS_TSAN 0
#define SLUICE_TESTING_HAS_ASAN 0
#endif
#if defined(__SANITIZE_THREAD__) || SLUICE_TESTING_HAS_TSAN
inline constexpr std::size_t kLargestSweepBytes = std::size_t{32} << 20;
#elif defined(__SANITIZE_ADDRESS__) || SLUICE_TESTING_HAS_ASAN
inline constexpr std::size_t kLargestSweepBytes = std::size_t{64} << 20;
#else
inline constexpr std::size_t kLargestSweepBytes = std::size_t{256} << 20;
#endif
#undef SLUICE_TESTING_HAS_ASAN
#undef SLUICE_TESTING_HAS_TSAN

// Pre-faulted anonymous memory, a SharedBuffer, or sim device memory. Owns
// what it holds. Device memory is reached only through the methods below
// (synchronous copies through the backend); data() is its address, for ops.
class TestBuffer {
 public:
  TestBuffer() = default;
  static TestBuffer Anonymous(std::size_t size);
  static TestBuffer Shared(TransferEngine& engine, std::size_t size);
  // `size` bytes on device `device` of the process's sim backend.
  static TestBuffer Device(int device, std::size_t size);
  TestBuffer(TestBuffer&& o) noexcept;
  TestBuffer& operator=(TestBuffer&& o) noexcept;
  ~TestBuffer();

  char* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool on_device() const { return device_ != -1; }
  int device() const { return device_; }
  void Fill(std::uint64_t seed);  // Deterministic pattern from `seed`.
  // Puts the pattern `seed` would put at `pattern_off` into [off, off+len).
  void FillRange(std::size_t off, std::size_t len, std::uint64_t seed, std::size_t pattern_off);
  void Zero();
  char ByteAt(std::size_t off) const;
  // True if [off, off+len) holds the pattern `seed` would put at `pattern_off`.
  bool Holds(std::size_t off, std::size_t len, std::uint64_t seed, std::size_t pattern_off) const;

 private:
  // Device memory: copies `len` bytes between host and device memory.
  void CopySync(void* dst, const void* src, std::size_t len) const;

  char* data_ = nullptr;
  std::size_t size_ = 0;
  bool anonymous_ = false;
  int device_ = -1;
  SharedBuffer shared_;
};

// Byte `i` of the pattern for `seed`.
inline char PatternByte(std::uint64_t seed, std::size_t i) {
  return static_cast<char>((i * 131 + seed * 7 + (i >> 12)) & 0xff);
}

EngineConfig ConfigFor(Mode mode, bool initiator);

struct EnginePair {
  Mode mode;
  std::unique_ptr<TransferEngine> target;
  std::unique_ptr<TransferEngine> initiator;
  SegmentId segment;

  // Creates both engines and opens the target's segment; aborts the test on
  // failure (ASSERT semantics via GTEST_FAIL in the .cc).
  static std::unique_ptr<EnginePair> Make(Mode mode, EngineConfig initiator_config);
  static std::unique_ptr<EnginePair> Make(Mode mode) { return Make(mode, ConfigFor(mode, true)); }

  // Target memory in the form the mode needs (device memory on device 1
  // with `device`), registered with `access`.
  TestBuffer TargetBuffer(std::size_t size, Access access, RegionKey* key, bool device = false);
  // Initiator memory (device memory on device 0 with `device`) registered
  // local-only.
  TestBuffer LocalBuffer(std::size_t size, RegionKey* key, bool device = false);
  // Waits (bounded) until the initiator's copy of the target table has `key`.
  bool AwaitRemoteKey(RegionKey key);
};

}  // namespace sluice::testing

#endif  // SLUICE_TRANSFER_TESTING_ENGINE_PAIR_H_
