// The one internal interface every transport implements. A transport states
// what it can do (TransportCaps: the memory kinds each end may hold,
// same-host only or not, mapping for zero-copy reads, notify ordering) and
// opens a path to each peer it can reach; the engine chooses the path of
// each op from those capabilities, the two regions' kinds and the peer,
// never from a transport's name (names are for logs and counters only).
//
// A transport owns what a peer needs to reach this engine's memory through
// it: it packs a blob per registered region (PackRegion: a shared mapping's
// file, an exported device handle, a remote key) and one per engine
// (LinkBlob: an address to connect to), and reads only its own blobs back
// from a peer's table and hello (WireRegion::Blob, PeerLinkInfo::link).
// The engine moves the blobs and reads none, so adding a transport changes
// neither the wire format nor the engine: one directory, one entry in the
// factory table (transports.cc).
//
// The control plane is not a transport (control/): the engine's pooled
// connections to a peer carry the handshake, region tables and notifies
// whatever moves the bytes. A transport may carry its ops over them too
// (tcp does), as a half of each connection (control/conn_half.h): the
// initiator's from Transport::ClientHalf, the target's from its factory's
// `serve`; the engine hands each transport only its own halves.
#ifndef SLUICE_TRANSFER_TRANSPORT_H_
#define SLUICE_TRANSFER_TRANSPORT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "sluice/memory.h"
#include "sluice/status.h"
#include "sluice/transfer/engine.h"

#include "transfer/control/conn_half.h"
#include "transfer/region_table.h"
#include "transfer/wire.h"

namespace sluice::device {
class DeviceBackend;
}  // namespace sluice::device

namespace sluice::internal {

class BatchState;
class Transport;
struct SharedAllocation;

// A set of memory kinds, one bit per MemoryKind.
using KindSet = std::uint8_t;
constexpr KindSet KindBit(MemoryKind k) {
  return static_cast<KindSet>(KindSet{1} << static_cast<unsigned>(k));
}

struct TransportCaps {
  KindSet local_kinds = KindBit(MemoryKind::kHost);   // What the initiator's region may be.
  KindSet remote_kinds = KindBit(MemoryKind::kHost);  // What the target's region may be.
  bool same_host_only = false;  // Reaches only peers on this host; preferred when it does.
  bool maps = false;            // Maps a peer's shared allocation (MapPeerMemory).
  // Plans from the peer's region table as last pushed (OpQuery::remote).
  // A path without it leaves key, range, access and the remote region's
  // kind to the target's own checks, and the engine skips the lookup.
  bool reads_peer_table = false;
  // Notify ordering: a write this transport reports complete is visible to
  // the target, so the engine's write-then-notify epochs (write_order.h)
  // hold without a fence. The engine refuses a transport without it.
  bool completion_means_visible = true;
};

// One op as a path is asked to carry it.
struct OpQuery {
  const TransferRequest& op;
  MemoryKind local_kind;
  // The peer's table entry; null when the key is not in it, or (for a path
  // without caps().reads_peer_table) when the engine did not look it up.
  const WireRegion* remote;
};

class TransportPath;

// The initiator's check of `q.op` against the peer's table entry
// `q.remote` (not null): range and access bits (CheckRange). False, with
// the reason in `*failure`, when the op is wrong for the region: the path
// answers PlanVerdict::kFail.
bool OpFitsPeerRegion(const OpQuery& q, Status* failure);

// A region being registered, as PackRegion sees it.
struct RegionView {
  char* addr = nullptr;
  std::size_t length = 0;
  MemoryKind kind = MemoryKind::kHost;
  Access access = Access::kLocalOnly;
  int device = -1;
  // The AllocateShared allocation holding the region, or null.
  const SharedAllocation* shared = nullptr;
};

// What a transport publishes for one region: `bytes` goes into the region
// table under the transport's name (empty: nothing published); `hold` is
// kept with the region and dropped after it is unregistered and its last
// op ended (a registration with the transport's library, say).
struct RegionAccess {
  std::string bytes;
  std::shared_ptr<void> hold;
};

// How a path carries one op: filled by Plan(), read back by Post().
struct OpRoute {
  TransportPath* path = nullptr;
  MemoryKind local_kind = MemoryKind::kHost;  // Set by Plan() for the path's own use.
  std::uint64_t unit = 0;         // Bytes per completion unit; the op has ceil(length / unit).
  char* mapped = nullptr;         // The target range mapped into this process, if mapped.
  std::uint64_t remote_addr = 0;  // The target range in the peer's address space.
  std::shared_ptr<void> keep;     // Holds what `mapped` points into.
};

enum class PlanVerdict : std::uint8_t {
  kTake,  // This path carries the op; the route is filled.
  kPass,  // It cannot; the engine tries the next path.
  kFail,  // The op is wrong for the peer (e.g. outside the region); it fails through its batch.
};

// One transport's path to one peer, for one generation of the peer's link
// (a reconnect makes new paths). Thread-safe.
class TransportPath {
 public:
  explicit TransportPath(Transport* transport) : transport_(transport) {}
  virtual ~TransportPath() = default;

  Transport& transport() const { return *transport_; }

  // Whether this path carries `q.op` (see PlanVerdict). On kFail `*failure`
  // says why. Called on the submitting thread; must not block.
  virtual PlanVerdict Plan(const OpQuery& q, OpRoute* route, Status* failure) = 0;

  // Starts the units of each ops[i] whose routes[i].path is this path (the
  // routes of a whole batch, each path posting its share at once). Every
  // unit reports exactly once through batch->UnitDone, from any thread; the
  // batch's guard keeps completion off the submitting thread.
  virtual void Post(BatchState* batch, std::span<const TransferRequest> ops,
                    std::span<const OpRoute> routes) = 0;

  // [offset, offset + length) of the peer's region mapped into this process,
  // already checked against the region's range and access. Only for
  // transports whose caps().maps is set; others answer kUnimplemented.
  virtual Result<PeerMemory> Map(const WireRegion& region, std::uint64_t offset,
                                 std::uint64_t length);

  // The peer pushed a new region table (its allocations may have gone).
  virtual void OnTable(const RegionTable& /*table*/) {}

  // The link this path belongs to went down (the peer died or was
  // disconnected): release what the path holds of the peer (mappings,
  // opened allocations) and plan nothing more. Ops in flight keep what
  // they hold until they end. Called once, on an I/O thread.
  virtual void OnDown() {}

 private:
  Transport* transport_;
};

// What the engine knows of a peer when it opens a link to it.
struct PeerLinkInfo {
  const std::string& endpoint;
  const HostInfo& host;   // From the peer's hello.
  std::string_view link;  // The peer's LinkBlob for this transport; empty when none.
  // This transport's halves of the link's connections (ClientHalf), one per
  // connection; empty when it made none. They live as long as the link.
  std::span<ConnHalf* const> halves;
  std::shared_ptr<const std::atomic<bool>> alive;  // Drops to false when the link goes down.
};

// What a transport serving ops on the control plane's connections touches
// on the target's side (TransportFactory::serve). Its pointers outlive
// every connection.
struct ServeContext {
  RegionTableLocal* regions = nullptr;
  device::DeviceBackend* backend = nullptr;  // Of the device regions; null: none.
  // The most bytes one frame to or from device memory carries (staging slots).
  std::uint64_t slot_size = 0;
  std::uint64_t max_frame_payload = 0;
  std::chrono::milliseconds timeout{0};  // Bounds a staging copy.
  // Payload bytes peers' ops read from and wrote to this engine's memory
  // through the transport (its TransportStats::bytes_served_*).
  std::atomic<std::uint64_t>* served_read = nullptr;
  std::atomic<std::uint64_t>* served_written = nullptr;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual std::string_view name() const = 0;
  virtual const TransportCaps& caps() const = 0;

  // The path to a peer just connected, or null when this transport cannot
  // reach it (another host for a same-host transport, say).
  virtual std::shared_ptr<TransportPath> Attach(const PeerLinkInfo& peer) = 0;

  // What a peer needs to reach `region` through this transport (see
  // RegionAccess). Called on the registering thread for each region with
  // remote access, before it is published. An error fails the
  // registration. The default publishes nothing.
  virtual Result<RegionAccess> PackRegion(const RegionView& /*region*/) { return RegionAccess{}; }

  // What a peer needs to open a path to this engine through this transport,
  // sent in every hello-ok under name(); empty (the default) when nothing.
  virtual std::string LinkBlob() const { return {}; }

  // For a transport carrying its ops on the control plane's connections:
  // its half of a new connection to a peer (`conn` owns it), made before
  // the connection starts; Attach then gets the link's halves. Null (the
  // default): it does not ride connections. At most one transport of an
  // engine does.
  virtual std::unique_ptr<ConnHalf> ClientHalf(ConnPort* /*conn*/) { return nullptr; }

  // Bytes posted through this transport, by direction. Thread-safe.
  void Count(OpKind kind, std::uint64_t bytes) {
    (kind == OpKind::kRead ? read_ : written_).fetch_add(bytes, std::memory_order_relaxed);
  }
  TransportStats Stats() const {
    return TransportStats{std::string(name()), read_.load(std::memory_order_relaxed),
                          written_.load(std::memory_order_relaxed)};
  }

 private:
  std::atomic<std::uint64_t> read_{0};
  std::atomic<std::uint64_t> written_{0};
};

// Most transports one engine runs (and blobs a region carries).
constexpr std::size_t kMaxTransports = kMaxAccessBlobs;

// One entry of the factory table: how to make a transport and how it ranks.
struct TransportFactory {
  std::string_view name;
  std::string_view summary;  // One line, for help and errors.
  // Listed in EngineConfig::transports (false: made when `implied` says).
  bool listed = true;
  // Measured on the reference host (docs/benchmarks/transfer.md), host to
  // host, 16 MiB ops: paths are tried in order of bandwidth, then latency.
  double bandwidth_gbps = 0;
  double latency_us = 0;
  // For a transport whose fabric the environment picks: its measured
  // figures for the one this process will use, instead of the two above.
  void (*rank)(double* gbps, double* latency_us) = nullptr;
  // For a transport not listed: whether this engine runs it.
  bool (*implied)(const EngineConfig& config, const device::DeviceBackend* backend) = nullptr;
  Result<std::unique_ptr<Transport>> (*make)(const EngineConfig& config,
                                             device::DeviceBackend* backend) = nullptr;
  // For a transport carrying ops on the control plane's connections: its
  // target half of an accepted connection (`conn` owns it). Every engine
  // serves it on every connection, whether or not it runs the transport
  // itself (a peer may send its ops whatever this engine initiates with).
  std::unique_ptr<ConnHalf> (*serve)(ConnPort* conn, const ServeContext& ctx) = nullptr;
};

// Every transport this build has, in no order.
std::span<const TransportFactory> TransportFactories();

// The names EngineConfig::transports may list, comma-separated, for errors
// and help ("tcp, shm, ...").
std::string ListedTransportNames();

// The transports `config.transports` enables and those implied by the
// configuration (devipc with a device backend), each made once per engine
// (at most kMaxTransports), in the order their paths are tried (the
// factory table's rank). Errors: kInvalidArgument naming an unknown
// transport; what a factory refuses.
Result<std::vector<std::unique_ptr<Transport>>> MakeTransports(const EngineConfig& config,
                                                               device::DeviceBackend* backend);

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_TRANSPORT_H_
