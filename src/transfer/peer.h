// The initiator's record of one peer segment: its current link (pooled tcp
// control-plane connections, a path per transport that reaches the
// peer; replaced on reconnect), its region table as last pushed, and
// write-then-notify ordering.
#ifndef SLUICE_TRANSFER_PEER_H_
#define SLUICE_TRANSFER_PEER_H_

#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/net.h"
#include "transfer/control/client_conn.h"
#include "transfer/transport.h"
#include "transfer/wire.h"
#include "transfer/write_order.h"

namespace sluice::internal {

// One generation of connections to a peer. Immutable once published, except
// `alive`, which drops to false (never back) when any connection closes.
struct Link {
  std::vector<std::shared_ptr<ClientConn>> conns;  // conns[0] carries notifies.
  // The paths of the transports that reach the peer, in the engine's order
  // of preference.
  std::vector<std::shared_ptr<TransportPath>> paths;
  std::shared_ptr<std::atomic<bool>> alive = std::make_shared<std::atomic<bool>>(true);
  Status down_reason;  // Set once, before alive drops.
};

class Peer {
 public:
  Peer(SegmentId id, std::string endpoint, HostPort hp);

  SegmentId id() const { return id_; }
  const std::string& endpoint() const { return endpoint_; }
  const HostPort& host_port() const { return hp_; }
  WriteOrder& order() { return order_; }
  Mutex& open_mu() { return open_mu_; }

  std::shared_ptr<Link> link() const;
  void SetLink(std::shared_ptr<Link> link, RegionTable table);
  // Marks `link` dead (if still current or not) and closes its connections.
  void LinkDown(const std::shared_ptr<Link>& link, const Status& why);

  // Applies a pushed table if newer than the one held.
  void UpdateTable(RegionTable table);
  std::vector<RegionInfo> Regions() const;
  // The table entry for `key` (shared, not copied: its blobs stay as they
  // were when the table came); null if unknown.
  std::shared_ptr<const WireRegion> FindRegion(std::uint64_t key) const;

 private:
  void SetTableLocked(RegionTable table) SLUICE_REQUIRES(mu_);

  const SegmentId id_;
  const std::string endpoint_;
  const HostPort hp_;
  Mutex open_mu_;  // Serializes (re)connecting.
  mutable Mutex mu_;
  std::shared_ptr<Link> link_ SLUICE_GUARDED_BY(mu_);
  std::uint64_t table_version_ SLUICE_GUARDED_BY(mu_) = 0;
  std::unordered_map<std::uint64_t, std::shared_ptr<const WireRegion>> regions_
      SLUICE_GUARDED_BY(mu_);
  WriteOrder order_;
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_PEER_H_
