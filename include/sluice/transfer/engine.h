// sluice/transfer/engine.h
//
// TransferEngine moves bytes between registered memory of processes with
// one-sided reads and writes. A process runs one engine; its endpoint
// "host:port" names its segment. Peers find each other by a direct handshake
// on that port (no metadata service): OpenSegment() fetches the peer's region
// table, and the peer pushes a new table whenever it changes.
//
// Transports: "tcp" (a per-peer pool of persistent connections, ops cut into
// slices striped over the pool, payload read straight into the destination)
// and "shm" (same host: memory from AllocateShared() is mapped by the peer and
// moved with one memcpy; other memory with process_vm_readv/writev), and
// "ucx" (one-sided puts and gets by UCX over what it finds between the
// engines -- RDMA, its shared memory or its tcp, as UCX_TLS allows; both
// ends must run it). Per op the engine tries the paths that reach the peer
// in the order of their measured bandwidth (shm, then ucx, then tcp); a
// per-op hint keeps an op on this host.
//
// Device memory: an engine configured with a device backend
// (EngineConfig::device) registers device memory (RegisterMemory with
// MemoryKind::kDevice) and runs "devipc": a same-host transport that opens a
// peer's exported device allocation and moves bytes with the backend's
// asynchronous copies, from host or device memory here to a device region
// there (and back, for reads). Every other pair of kinds goes over tcp,
// each side staging its device memory through pinned buffers of its
// connections (device -> pinned -> socket -> pinned -> device).
//
// Safety: a target checks every tcp op against its region table (key, bounds,
// access) before touching memory. shm ops are checked by the initiator
// against the table the target published; the kernel's same-user rule is the
// boundary there (a shared allocation is mapped whole by peers). ucx ops
// are checked by the initiator too, and UCX maps each region with its
// access bits only.
//
// Ownership: the engine never owns registered memory; the caller keeps it
// allocated until UnregisterMemory() succeeds. SharedBuffer owns its mapping.
//
// Thread safety: every method may be called from any thread concurrently.
// Completion callbacks and notify handlers run on engine I/O threads; they
// must not block and must not destroy the engine.

#ifndef SLUICE_TRANSFER_ENGINE_H_
#define SLUICE_TRANSFER_ENGINE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/memory.h"
#include "sluice/status.h"

namespace sluice {

namespace internal {
class EngineImpl;
class BatchState;
struct SharedAllocation;
}  // namespace internal

struct EngineConfig {
  // Endpoint to listen on; port 0 lets the kernel pick (read endpoint()).
  std::string listen = "127.0.0.1:0";
  // What peers dial (endpoint()): "host", "host:port", "[v6]" or
  // "[v6]:port" (a missing port is the bound one). Empty: `listen` itself,
  // which then must not be a wildcard (0.0.0.0, ::).
  std::string advertise;
  // Subset of {"tcp", "shm", "ucx"}; at least one.
  std::vector<std::string> transports = {"tcp", "shm"};
  // Event-loop threads for tcp and copy threads for shm (each), 1..64.
  int io_threads = 2;
  // Persistent tcp connections per peer, 1..64.
  int connections_per_peer = 4;
  // Ops longer than this are cut into slices striped over the pool.
  std::size_t slice_size = std::size_t{1} << 20;
  // Largest payload one incoming frame may carry; larger frames are malformed.
  std::size_t max_frame_payload = std::size_t{64} << 20;
  // Largest Notify() message.
  std::size_t max_notify_bytes = std::size_t{64} << 10;
  // Shared secret; empty disables authentication. Both sides must agree.
  // With one, every tcp frame after the handshake carries a MAC (its
  // header, and its body where it has one): altered, replayed or injected
  // frames close the connection.
  std::string secret;
  // Encrypt tcp payload too (AES-256-GCM, keyed per connection from the
  // secret, which it needs): as initiator, ask every target for it; as
  // target, refuse initiators that do not. Same-host transports (shm,
  // devipc) move memory within the host and are not encrypted; ucx cannot
  // be enabled with it.
  bool encrypt_data = false;
  // A peer with work outstanding that makes no progress for this long is
  // declared dead and every pending op to it fails.
  std::chrono::milliseconds op_timeout{10000};
  // Bound on connecting and handshaking in OpenSegment().
  std::chrono::milliseconds connect_timeout{5000};
  // Target side: an accepted connection that has not completed its
  // handshake this long after it was accepted is closed, however it
  // trickles bytes (a silent or slow stranger holds nothing for long).
  std::chrono::milliseconds handshake_timeout{5000};
  // Target side: accepted connections still in their handshake, at most;
  // more are closed as they are accepted (and counted in the rate-limited
  // refusal log), so strangers cannot pile up descriptors and sessions.
  int max_pending_handshakes = 256;
  // Device backend for device memory: "" (none: kDevice registrations are
  // refused), "sim" (host memory that behaves like a device: tests and CI)
  // or "cuda" (the CUDA runtime; needs a build with it and a GPU). The
  // backend is the process's one of that name, shared by every engine here.
  std::string device;
  // With a device backend: move device memory of same-host peers through
  // the backend's IPC (devipc). false: through tcp staging even on one host
  // (where device IPC is not allowed, e.g. between containers).
  bool device_ipc = true;
};

enum class OpKind : std::uint8_t { kRead, kWrite };  // Seen from the initiator.

// How the engine may route an op. It always picks, per op, among the enabled
// transports that reach the peer and move both regions' memory kinds,
// preferring one that stays on this host.
//   kAuto:         whichever path that leaves.
//   kSameHostOnly: only a path that stays on this host (never the network);
//                  Submit fails with kFailedPrecondition when none reaches
//                  the peer.
enum class TransportHint : std::uint8_t { kAuto, kSameHostOnly };

// Bytes an engine's transport has carried (ops posted, by direction).
struct TransportStats {
  std::string name;                 // As in EngineConfig::transports.
  std::uint64_t bytes_read = 0;     // By this engine's ops, from peers.
  std::uint64_t bytes_written = 0;  // By this engine's ops, to peers.
  // By peers' ops, from and to this engine's memory: counted where this
  // engine moves the bytes itself (tcp); shm and devipc peers copy without
  // it, and count only at their end.
  std::uint64_t bytes_served_read = 0;
  std::uint64_t bytes_served_written = 0;
};

// A peer segment opened by OpenSegment(); valid for the engine's lifetime.
struct SegmentId {
  std::uint64_t value = 0;
  friend bool operator==(SegmentId, SegmentId) = default;
};

// Unguessable key naming a registered region. 0 is never valid.
struct RegionKey {
  std::uint64_t value = 0;
  friend bool operator==(RegionKey, RegionKey) = default;
};

struct TransferRequest {
  OpKind kind = OpKind::kWrite;
  // Inside a region registered with this engine (any access).
  void* local = nullptr;
  SegmentId segment;
  RegionKey remote_key;
  std::uint64_t remote_offset = 0;
  std::uint64_t length = 0;
  TransportHint hint = TransportHint::kAuto;
};

// A region as published in a segment's table.
struct RegionInfo {
  RegionKey key;
  std::uint64_t addr = 0;  // In the owner's address space; informational.
  std::uint64_t length = 0;
  MemoryKind kind = MemoryKind::kHost;
  Access access = Access::kLocalOnly;
  bool shared = false;  // Backed by AllocateShared(): same-host peers map it.
  int device = -1;      // The device of kDevice memory; -1 for host memory.
};

// Handle to a submitted batch. Shared by the caller and the engine; dropping
// the caller's copy does not cancel the batch.
class TransferBatch {
 public:
  // True once every op has finished (landed or failed). Never blocks.
  bool done() const;
  // The batch's outcome: OK, or the first op error. REQUIRES: done().
  Status status() const;
  // Blocks until done or `timeout` passes. Returns status() when done,
  // kDeadlineExceeded (scope kRequest) if still running; the batch continues
  // and may be waited on again.
  Status Wait(std::chrono::milliseconds timeout) const;

 private:
  friend class internal::BatchState;
  TransferBatch() = default;
};

using BatchCallback = std::function<void(const Status&)>;

struct NotifyMessage {
  std::string sender;               // The sending engine's endpoint.
  std::span<const std::byte> data;  // Valid only during the handler call.
};
using NotifyHandler = std::function<void(const NotifyMessage&)>;

// A same-host peer's memory mapped into this process (MapPeerMemory).
struct PeerMemory {
  const void* data = nullptr;
  std::uint64_t length = 0;
  // Holds the mapping: `data` stays mapped while any copy of it lives, even
  // after the peer unregisters, frees the memory or exits.
  std::shared_ptr<const void> keep;
};

// Memory from AllocateShared(): pre-faulted, memfd-backed, hugepage-advised.
// Moving it keeps the mapping; destroying it unmaps once no registration
// still uses it (registrations keep the mapping alive until unregistered).
class SharedBuffer {
 public:
  SharedBuffer() = default;
  SharedBuffer(SharedBuffer&&) noexcept = default;
  SharedBuffer& operator=(SharedBuffer&&) noexcept = default;
  ~SharedBuffer();

  void* data() const;
  std::size_t size() const;
  explicit operator bool() const { return alloc_ != nullptr; }

 private:
  friend class internal::EngineImpl;
  explicit SharedBuffer(std::shared_ptr<internal::SharedAllocation> alloc);
  std::shared_ptr<internal::SharedAllocation> alloc_;
};

// Names this process's host for same-host detection: two engines share
// memory directly (shm, device IPC) only when their kernels' boot ids and
// their host ids are equal; with no host id (the default, or the
// SLUICE_HOST_ID environment variable) they must also share a pid
// namespace. Containers on one kernel are told apart by giving each its
// own id, or treated as one host by giving them the same id (they then
// also need each other's /proc, e.g. a shared pid namespace, or the
// mapping fails and tcp carries the bytes). Call before the first engine
// starts. Errors: kInvalidArgument (empty, over 64 bytes, or not
// [A-Za-z0-9._-]); kFailedPrecondition once an engine has started.
Status SetHostId(std::string_view id);

class TransferEngine {
 public:
  // Starts the listener and I/O threads.
  // Errors: kInvalidArgument naming the bad config field; kUnavailable
  // (scope kTransport) if the endpoint cannot be bound.
  static Result<std::unique_ptr<TransferEngine>> Create(const EngineConfig& config);

  // Stops I/O threads; batches still pending fail with kCancelled, their
  // callbacks run before the destructor returns.
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // "host:port" peers pass to OpenSegment(); the real port when 0 was asked.
  const std::string& endpoint() const;

  // Registers [addr, addr+len) for use in ops. Regions may not overlap.
  // Regions with remote access appear in the table peers see, and the new
  // table is pushed to connected peers. REQUIRES: the memory stays allocated
  // until UnregisterMemory() succeeds.
  // kDevice memory must be the configured backend's (EngineConfig::device);
  // `device` names its device (-1: whatever the backend says it is). A
  // device region with remote access is exported for same-host peers when
  // the backend knows its allocation (it allocated it).
  // Errors: kInvalidArgument (null, zero length; kHost memory the backend
  // says is device memory, kDevice memory it says is not, or on another
  // device than `device`, or running past its allocation); kAlreadyExists
  // (overlaps a registered region); kUnimplemented (kDevice without a
  // device backend).
  Result<RegionKey> RegisterMemory(void* addr, std::size_t len, MemoryKind kind, Access access,
                                   int device = -1);

  // Removes a registration. Errors: kNotFound (unknown key, e.g. already
  // unregistered); kFailedPrecondition if ops using it are in flight: wait for
  // them and retry. Peers doing shm ops are not tracked: a target must know
  // its peers are done before it frees memory.
  Status UnregisterMemory(RegionKey key);

  // Allocates `len` bytes (rounded up to 2 MiB) of memfd-backed memory,
  // pre-faulted so first use costs no page faults. Register it to use it.
  // Errors: kInvalidArgument (0 bytes); kResourceExhausted (more than the
  // host's available memory, MemAvailable, or the kernel refused it).
  Result<SharedBuffer> AllocateShared(std::size_t len);

  // Connects to the peer at `endpoint` ("host:port"), authenticates, fetches
  // its region table and keeps the connections open. Cached: a second call
  // for a live peer returns the same id at once; for a dead peer it
  // reconnects under the same id. Blocks up to connect_timeout.
  // Errors: kInvalidArgument (malformed endpoint); kUnavailable /
  // kDeadlineExceeded (scope kEndpoint) when unreachable; kPermissionDenied
  // (wrong secret); kFailedPrecondition (protocol version mismatch).
  Result<SegmentId> OpenSegment(std::string_view endpoint);

  // The peer's region table as last fetched or pushed.
  // Errors: kNotFound (unknown id).
  Result<std::vector<RegionInfo>> SegmentRegions(SegmentId segment) const;

  // Starts `ops` and returns at once. `ops` is copied. REQUIRES: each op's
  // local memory stays registered and allocated until the batch is done
  // (the engine pins the registration, so UnregisterMemory fails meanwhile).
  // On OK, `callback` (if set) runs exactly once on an I/O thread when every
  // op has finished, after which done() is true.
  // Up-front errors (nothing sent, callback never called): kInvalidArgument
  // (empty batch, zero length, local memory not registered, unknown
  // segment); kFailedPrecondition (hint names a transport that cannot reach
  // the peer); kUnavailable (scope kEndpoint) if the peer is known dead.
  // Op errors, reported by the batch: kNotFound / kInvalidArgument /
  // kPermissionDenied (target rejected key, bounds or access; scope
  // kRequest), kUnavailable / kDeadlineExceeded (scope kEndpoint: the peer
  // died or stalled for op_timeout; reopen the segment and retry).
  Result<std::shared_ptr<TransferBatch>> Submit(std::span<const TransferRequest> ops,
                                                BatchCallback callback = nullptr);

  // Maps [offset, offset + length) of the peer's region `key` for reading
  // in place: nothing is copied, the bytes are the peer's memory as it
  // changes. Only for a shared allocation (AllocateShared memory) of a peer
  // on this host whose region allows remote reads. Mappings are cached per
  // allocation. Errors: kInvalidArgument (unknown segment, zero length,
  // range outside the region); kNotFound (no such key in the peer's table);
  // kPermissionDenied (no remote reads); kFailedPrecondition (the peer is on
  // another host, shm is disabled, or the region is not a shared
  // allocation: read it with Submit); kUnavailable (scope kEndpoint: the
  // peer is down; or the mapping failed).
  Result<PeerMemory> MapPeerMemory(SegmentId segment, RegionKey key, std::uint64_t offset,
                                   std::uint64_t length);

  // Submit() then Wait(timeout): the batch's status, or kDeadlineExceeded.
  Status TransferSync(std::span<const TransferRequest> ops,
                      std::chrono::milliseconds timeout = std::chrono::seconds(60));

  // Sends a small message to the peer's notify handler, delivered after
  // every write this engine submitted to that peer before this call has
  // landed (or failed). Returns once queued; delivery is not acknowledged.
  // Errors: kInvalidArgument (empty, or longer than max_notify_bytes;
  // unknown segment); kUnavailable (scope kEndpoint) if the peer is dead.
  Status Notify(SegmentId segment, std::span<const std::byte> data);

  // Installs the handler for incoming notifies (replacing any previous one).
  // Runs on an I/O thread; without a handler, messages are dropped.
  void SetNotifyHandler(NotifyHandler handler);

  // Bytes each enabled transport has carried since Create(). Thread-safe;
  // the figures are counters read without a lock.
  std::vector<TransportStats> TransportCounters() const;

 private:
  explicit TransferEngine(std::unique_ptr<internal::EngineImpl> impl);
  std::unique_ptr<internal::EngineImpl> impl_;
};

}  // namespace sluice

#endif  // SLUICE_TRANSFER_ENGINE_H_
