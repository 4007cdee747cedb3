// The master's calls, independent of how they arrive: one mutex around
// MasterState, a ticker thread for timeouts, WaitFor calls and reads of
// spilled objects parked until they can be answered. The gRPC service and
// the fast lane both call in here with the same protobuf messages.
#ifndef SLUICE_STORE_MASTER_MASTER_CORE_H_
#define SLUICE_STORE_MASTER_MASTER_CORE_H_

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "sluice/store/master.h"

#include "common/mutex.h"
#include "proto/store/v1/master.pb.h"
#include "store/master/master_state.h"
#include "store/master/rpc_stats.h"

namespace sluice::internal {

class MasterCore {
 public:
  // Completion of a call that may be answered later (parked). Runs exactly
  // once, on the caller's thread or the thread that unparks it (a heartbeat
  // or the ticker), without the core's lock held.
  using Done = std::function<void(const Status&)>;
  // Receives object events on the ticker thread, with the core's lock held:
  // it must not call back into the core.
  using EventSink = std::function<void(const std::vector<ObjectEvent>&)>;

  MasterCore(const MasterOptions& options, EventSink sink);
  // Shutdown(), then frees the state.
  ~MasterCore();
  // Answers every parked call with kCancelled (later ones too) and stops the
  // ticker. Idempotent.
  void Shutdown();

  // Each call validates its request (errors name the bad field) and is
  // retry-safe as master.proto describes.
  Status RegisterNode(const store::v1::RegisterNodeRequest& req,
                      store::v1::RegisterNodeResponse* resp);
  // `req` and `resp` must stay valid until `done` runs. With `wait_ms`, a
  // heartbeat that would carry nothing is held until the node has news
  // (a commit or removal of an object it holds, a disk-tier command) or the
  // wait ends: directory changes reach nodes at once, not a heartbeat later.
  // A new heartbeat from the same node answers a held one.
  void Heartbeat(const store::v1::HeartbeatRequest* req, store::v1::HeartbeatResponse* resp,
                 Done done);
  Status PutStart(const store::v1::PutStartRequest& req, store::v1::PutStartResponse* resp);
  // With `reserve`, also offers a reservation for the next put. `req` and
  // `resp` must stay valid until `done` runs: with durable_commits, a
  // commit is answered once every node holding a copy acknowledged it (at
  // the latest after node_timeout, when such a node is lost anyway).
  void PutEnd(const store::v1::PutEndRequest* req, store::v1::PutEndResponse* resp, Done done);
  void PutReserved(const store::v1::PutReservedRequest* req, store::v1::PutReservedResponse* resp,
                   Done done);
  Status PutRevoke(const store::v1::PutRevokeRequest& req);
  Status Unreserve(const store::v1::UnreserveRequest& req);
  // `req` and `resp` must stay valid until `done` runs. With `wait_ms`, a
  // missing or uncommitted key parks the call until its commit.
  void GetStart(const store::v1::GetStartRequest* req, store::v1::GetStartResponse* resp, Done done,
                bool allow_wait = true);
  Status GetEnd(const store::v1::GetEndRequest& req);
  Status RenewRead(const store::v1::RenewReadRequest& req);
  Status Remove(const store::v1::KeyRequest& req);
  Status Exists(const store::v1::KeyRequest& req, store::v1::ExistsResponse* resp);
  void WaitFor(const store::v1::WaitForRequest& req, Done done);

  const MasterOptions& options() const { return options_; }
  MasterMetrics Metrics();
  // Transfer endpoints of the registered store nodes (Describe).
  std::vector<std::string> NodeEndpoints();
  // Appends the per-method RPC latency histograms to `out`.
  void WriteRpcStats(MetricsText& out) { rpc_stats_.Write(out); }

 private:
  static constexpr std::chrono::seconds kParkedGetTimeout{30};
  struct ParkedGet {
    const store::v1::GetStartRequest* req;
    store::v1::GetStartResponse* resp;
    MasterClock::time_point start;
    TimePoint deadline;
    Done done;
  };
  struct Waiter {
    Done done;
    TimePoint deadline;
  };
  struct ParkedHeartbeat {
    const store::v1::HeartbeatRequest* req;
    store::v1::HeartbeatResponse* resp;
    MasterClock::time_point start;
    TimePoint deadline;
    Done done;
  };
  struct ParkedCommit {
    std::vector<MasterState::CommitMark> marks;
    TimePoint deadline;
    Done done;
  };
  using Finish = std::vector<std::pair<Done, Status>>;

  // After a commit of `key` (status `st`): answers it now, or parks it
  // until its nodes acknowledge (durable_commits).
  void AnswerCommitLocked(const std::string& key, const Status& st, Done done, Finish* finish)
      SLUICE_REQUIRES(mu_);
  // Answers parked commits that are acknowledged, or past their deadline
  // (`now`), or every one when `all`.
  void ResumeCommitsLocked(TimePoint now, bool all, Finish* finish) SLUICE_REQUIRES(mu_);

  static void FillGetStart(const ReadGrant& g, store::v1::GetStartResponse* resp);
  // Asks again for parked readers of `keys` (or of every parked key when
  // `all`); appends the answered ones to `finish`.
  void ResumeParkedGetsLocked(const std::vector<std::string>& keys, bool all, Finish* finish)
      SLUICE_REQUIRES(mu_);
  void TickLoop();
  static void Run(Finish& finish);
  // After `key` committed: answers held heartbeats of nodes with news and
  // the key's waiters (into `finish`, to run without the lock) and, when
  // `reserve` asks, offers a reservation into `out` (left empty when
  // declined: the caller's next put takes two round trips).
  void CommittedLocked(const std::string& key, const store::v1::ReserveNext* reserve,
                       store::v1::Reservation* out, Finish* finish) SLUICE_REQUIRES(mu_);
  // Answers held heartbeats whose node has news, or is past its deadline
  // (`now`), or every one when `all`.
  void AnswerHeartbeatsLocked(TimePoint now, bool all, Finish* finish) SLUICE_REQUIRES(mu_);
  // One heartbeat's answer for `node_id` (applies `done`, acknowledges).
  void FillHeartbeatLocked(const std::string& node_id, std::uint64_t acked_seq,
                           const std::vector<CommandResult>& done,
                           store::v1::HeartbeatResponse* resp) SLUICE_REQUIRES(mu_);

  const MasterOptions options_;  // The same as state_.options().
  EventSink sink_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  MasterState state_ SLUICE_GUARDED_BY(mu_);
  std::map<std::string, std::vector<Waiter>> waiters_ SLUICE_GUARDED_BY(mu_);
  std::map<std::string, std::vector<ParkedGet>> parked_gets_ SLUICE_GUARDED_BY(mu_);
  std::map<std::string, ParkedHeartbeat> parked_heartbeats_ SLUICE_GUARDED_BY(mu_);  // By node id.
  std::vector<ParkedCommit> parked_commits_ SLUICE_GUARDED_BY(mu_);
  RpcStats rpc_stats_;
  std::thread ticker_;
};

}  // namespace sluice::internal

#endif  // SLUICE_STORE_MASTER_MASTER_CORE_H_
