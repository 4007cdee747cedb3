// The store client's implementation, shared by its parts:
// store_client.cc (set-up, the master's fast lane and gRPC calls, events,
// the public facade), store_client_put.cc (puts and reservations) and
// store_client_get.cc (gets).
#ifndef SLUICE_STORE_CLIENT_STORE_CLIENT_IMPL_H_
#define SLUICE_STORE_CLIENT_STORE_CLIENT_IMPL_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "sluice/store/client.h"

#include "common/mutex.h"
#include "common/owner_link.h"
#include "common/random.h"
#include "common/rpc_status.h"
#include "proto/store/v1/master.grpc.pb.h"
#include "store/client/reservation_cache.h"
#include "store/fastlane/client.h"
#include "store/proto_convert.h"

namespace sluice::internal {

namespace pb = ::sluice::store::v1;

class StoreClientImpl;

// How a call asks the master again while it cannot answer: 50 ms doubling
// to 1 s between attempts, until the next attempt would start past
// `budget` (StoreClientConfig::master_retry) after the first.
class MasterBackoff {
 public:
  explicit MasterBackoff(std::chrono::milliseconds budget)
      : give_up_(std::chrono::steady_clock::now() + budget) {}
  // True once waiting for another attempt would pass the budget.
  bool exhausted() const { return std::chrono::steady_clock::now() + next_ > give_up_; }
  // Waits before the next attempt.
  void Sleep() {
    std::this_thread::sleep_for(next_);
    next_ = std::min(next_ * 2, std::chrono::milliseconds(1000));
  }

 private:
  std::chrono::steady_clock::time_point give_up_;
  std::chrono::milliseconds next_{50};
};

class StoreClientImpl {
 public:
  StoreClientImpl(TransferEngine* engine, StoreClientConfig config)
      : engine_(engine),
        config_(std::move(config)),
        link_(std::make_shared<OwnerLink<StoreClientImpl>>(this)) {}
  ~StoreClientImpl();
  Status Init();
  // False for a metadata-only client (StoreClient::CreateMetadataOnly):
  // the StoreClient refuses every data call before it gets here.
  bool has_engine() const { return engine_ != nullptr; }

  // The StoreClient calls; their contracts are in sluice/store/client.h.
  Status PutFrom(std::string_view key, const void* data, std::size_t len, const PutOptions& o);
  Status Put(std::string_view key, std::span<const std::byte> value, const PutOptions& o);
  Status PutFromRuns(std::string_view key, std::span<const StoreClient::IoRun> runs,
                     const PutOptions& o);
  std::vector<Status> BatchPutFrom(std::span<const StoreClient::PutItem> items);
  Result<ObjectMeta> GetInto(std::string_view key, void* dst, std::size_t capacity);
  Result<std::vector<std::byte>> Get(std::string_view key, ObjectMeta* meta);
  Result<ObjectMeta> GetIntoRunsInParts(std::string_view key,
                                        std::span<const StoreClient::IoRun> runs,
                                        std::span<const std::size_t> parts,
                                        std::chrono::milliseconds wait,
                                        const std::function<void(std::size_t)>& landed);
  std::vector<Result<ObjectMeta>> BatchGetInto(std::span<const StoreClient::GetItem> items);
  Status Remove(std::string_view key);
  // store_client_view.cc.
  Result<ObjectView> GetInPlace(std::string_view key, std::chrono::milliseconds wait);
  Status EndView(const std::string& key, std::uint64_t lease_id);  // Waits for the answer.
  Status RenewView(const std::string& key, std::uint64_t lease_id);
  void EndViewAsync(const std::string& key, std::uint64_t lease_id);
  Result<bool> Exists(std::string_view key);
  Status WaitFor(std::string_view key, std::chrono::milliseconds timeout);
  Result<StoreUsage> Usage();
  Status Warm();
  void Subscribe(std::function<void(const StoreEvent&)> handler);

  // Bytes copied through the staging buffer (Put, Get).
  std::atomic<std::uint64_t> bytes_staged_{0};

 private:
  // store_client.cc: calls to the master (fast lane, else gRPC) and events.

  // Opens the engine's connection to the node at `endpoint` and reads one
  // byte of each of its readable regions (a same-host region gets mapped).
  Status WarmNode(const std::string& endpoint);

  // Reads the event stream; reopens it (every 200 ms) while the master is away.
  void WatchLoop();
  void StopWatching();
  static void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) {
    ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  }
  // One blocking unary RPC with a deadline; the answer's status as ours.
  template <typename Req, typename Resp>
  Status Call(grpc::Status (pb::Master::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
              const Req& req, Resp* resp, std::string_view name,
              std::chrono::milliseconds timeout) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout);
    return FromGrpc((Stub().get()->*method)(&ctx, req, resp), name);
  }
  // As above, over the fast lane when there is one; falls back to gRPC when
  // the lane fails (every lane method is retry-safe, see master.proto).
  template <typename Req, typename Resp>
  Status Call(grpc::Status (pb::Master::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
              fastlane::Method fast, const Req& req, Resp* resp, std::string_view name) {
    return Call(method, fast, req, resp, name, config_.rpc_timeout);
  }
  // Retries while the master is unreachable or has no node for the object
  // yet (kUnavailable: a master restart), with MasterBackoff. Every call
  // here is retry-safe.
  template <typename Req, typename Resp>
  Status Call(grpc::Status (pb::Master::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
              fastlane::Method fast, const Req& req, Resp* resp, std::string_view name,
              std::chrono::milliseconds timeout) {
    MasterBackoff backoff(config_.master_retry);
    while (true) {
      Status s = CallOnce(method, fast, req, resp, name, timeout);
      if (s.code() != StatusCode::kUnavailable) {
        return s;
      }
      Reresolve();
      if (backoff.exhausted()) {
        return s;
      }
      backoff.Sleep();
      resp->Clear();
    }
  }
  template <typename Req, typename Resp>
  Status CallOnce(grpc::Status (pb::Master::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                  fastlane::Method fast, const Req& req, Resp* resp, std::string_view name,
                  std::chrono::milliseconds timeout) {
    if (std::shared_ptr<fastlane::Client> lane = FastLane()) {
      fastlane::Client::Outcome out = lane->Call(fast, req.SerializeAsString(), timeout);
      const bool timed_out =
          !out.transport_ok && out.result.status().code() == StatusCode::kDeadlineExceeded;
      if ((out.transport_ok || timed_out) && !out.result.ok()) {
        // The master's answer, or no answer in time (a retry would wait again).
        const Status& e = out.result.status();
        return Status(e.code(), std::string(name) + ": " + std::string(e.message()), e.scope());
      }
      if (out.transport_ok &&
          resp->ParseFromArray(out.result->data(), static_cast<int>(out.result->size()))) {
        return Status::Ok();
      }
      LaneFailed(lane, out.transport_ok ? Status(StatusCode::kDataLoss, "unparsable answer")
                                        : out.result.status());
      resp->Clear();
    }
    return Call(method, req, resp, name, timeout);
  }
  // The master's stub: replaced when the master moved (Reresolve).
  std::shared_ptr<pb::Master::Stub> Stub() {
    MutexLock lock(master_mu_);
    return stub_;
  }
  // After a call found the master unreachable: asks config_.resolve_master
  // (at most every 500 ms); another endpoint gets a new stub, and the fast
  // lane and reservations of the old master are dropped.
  void Reresolve();
  // The fast lane, once the master has said where it is; asks again at most
  // once a second while it is unknown or after it failed.
  std::shared_ptr<fastlane::Client> FastLane();
  // Drops a failed lane (its connections are stale); the next call asks the
  // master again after the probe interval.
  void LaneFailed(const std::shared_ptr<fastlane::Client>& lane, const Status& why);

  // store_client_put.cc: puts and reservations.

  // An open put: where to write and how to commit.
  struct OpenPut {
    std::string key;
    std::uint64_t put_id = 0;
    std::vector<std::pair<SegmentId, ReplicaLocation>> replicas;
  };
  // The tensor, policy and request id of a put request (a random request id
  // when the caller gave none: retries of this one call stay idempotent).
  template <typename Req>
  static void FillPutFields(const PutOptions& o, Req* req) {
    if (o.tensor.has_value()) {
      ToProto(*o.tensor, req->mutable_tensor());
    }
    ToProto(o.policy, req->mutable_policy());
    req->set_request_id(o.request_id.empty() ? RandomId() : o.request_id);
  }
  // `unreachable` (optional, in-out): endpoints to avoid; a replica's node
  // that cannot be reached is added to it (and the put revoked).
  Result<OpenPut> PutStart(std::string_view key, std::size_t len, const PutOptions& o,
                           std::vector<std::string>* unreachable = nullptr);
  // One write per replica of `put`: [local, local+len) to `object_offset`.
  static std::vector<TransferRequest> WriteOps(const OpenPut& put, const void* local,
                                               std::uint64_t object_offset, std::uint64_t len);
  // Writes [local, local+len) at `object_offset` of every replica.
  Status WriteRange(const OpenPut& put, const char* local, std::uint64_t object_offset,
                    std::uint64_t len);
  void Revoke(const OpenPut& put);
  // Commits `put` (PutEnd), or revokes it when `written` failed. With
  // `next`, the commit asks for a reservation for the client's next put,
  // which is kept when offered.
  Status FinishPut(const OpenPut& put, Status written,
                   const std::optional<pb::ReserveNext>& next = std::nullopt,
                   const std::shared_ptr<fastlane::Client>& lane = nullptr);
  // Puts `len` bytes under `key`; `write(const OpenPut&) -> Status` writes
  // them into every replica of the put it is given. Over a held reservation
  // in one round trip when one fits, else PutStart + write + PutEnd. Either
  // commit asks for a reservation for the next put when puts repeat a shape.
  template <typename Write>
  Status DoPut(std::string_view key, std::uint64_t len, const PutOptions& o, const Write& write);
  // The one-round-trip put: writes into `held` and commits with PutReserved
  // (asking for the next reservation with `next`). nullopt when the caller
  // should put the long way: the reservation is gone (expired, node lost)
  // or the write failed (the long way then reports errors properly).
  template <typename Write>
  std::optional<Status> PutOverReservation(const std::shared_ptr<fastlane::Client>& lane,
                                           HeldReservation held, std::string_view key,
                                           const PutOptions& o, const Write& write,
                                           const std::optional<pb::ReserveNext>& next);
  // Releases reservations this client gives up, one way (no answer awaited;
  // if it is lost the master frees them after their ttl).
  void Unreserve(const std::shared_ptr<fastlane::Client>& lane,
                 const std::vector<std::uint64_t>& ids);
  // Keeps a reservation offered for `asked` (none when the master declined).
  void KeepReservation(const std::shared_ptr<fastlane::Client>& lane, const pb::Reservation& r,
                       const pb::ReserveNext& asked);

  // store_client_get.cc: reads.

  struct OpenGet {
    std::string key;
    std::uint64_t lease_id = 0;
    ObjectMeta meta;
    std::vector<ReplicaLocation> replicas;
  };
  // When no replica's node can be reached (it died and the master has not
  // yet noticed), ends the lease and asks again with backoff, up to
  // config_.master_retry: until the master serves another replica, or
  // drops the node and answers kNotFound (the object is lost).
  // `backoff`, when given, is the caller's budget (shared with its own
  // retries); otherwise one of config_.master_retry is made here.
  Result<OpenGet> GetStart(std::string_view key,
                           std::chrono::milliseconds wait = std::chrono::milliseconds(0),
                           MasterBackoff* backoff = nullptr);
  Result<OpenGet> GetStartOnce(std::string_view key, std::chrono::milliseconds wait);
  // Opens `key` (GetStart), runs `read` on the open get, ends it. When the
  // read failed on every replica with an endpoint-scoped error (the node
  // died between the master's answer and the copy), asks the master again
  // within the same config_.master_retry budget: it serves another replica,
  // or, once it drops the node, answers kNotFound. `read` may run several
  // times; it sets `*may_retry` false once it handed bytes on (a
  // request-scoped error is never retried). The open get's metadata is
  // returned on success.
  Result<ObjectMeta> ReadWithVerdict(std::string_view key, std::chrono::milliseconds wait,
                                     const std::function<Status(const OpenGet&, bool*)>& read);
  // Ends the read lease without waiting for the answer: the reader's bytes
  // have landed, and a lost GetEnd only delays the lease's timeout.
  void GetEnd(const OpenGet& g, bool completed);
  // Reads [object_offset, +len) into `local`, nearest replica first.
  Status ReadRange(const OpenGet& g, char* local, std::uint64_t object_offset, std::uint64_t len);
  // Reads the object from `object_offset` on into `runs` back to back, as
  // one batch, nearest replica first, trying the next when one fails.
  Status ReadRuns(const OpenGet& g, std::span<const StoreClient::IoRun> runs,
                  std::uint64_t object_offset);
  // Reads `runs` from the nearest replica as one batch per part, all in
  // flight at once, calling `landed(i)` as part i lands, in order. Returns
  // only once no batch writes into `runs` any more.
  Status ReadParts(const OpenGet& g, std::span<const StoreClient::IoRun> runs,
                   std::span<const std::size_t> parts,
                   const std::function<void(std::size_t)>& landed);

  TransferEngine* engine_;
  StoreClientConfig config_;
  // How ObjectViews end their reads while the client lives.
  std::shared_ptr<OwnerLink<StoreClientImpl>> link_;
  Mutex resolve_mu_;  // One Reresolve at a time.
  std::chrono::steady_clock::time_point next_resolve_ SLUICE_GUARDED_BY(resolve_mu_);
  Mutex master_mu_;
  std::string master_ SLUICE_GUARDED_BY(master_mu_);  // The endpoint stub_ dials.
  std::shared_ptr<pb::Master::Stub> stub_ SLUICE_GUARDED_BY(master_mu_);
  Mutex lane_mu_;
  std::shared_ptr<fastlane::Client> lane_ SLUICE_GUARDED_BY(lane_mu_);
  std::chrono::steady_clock::time_point next_lane_probe_ SLUICE_GUARDED_BY(lane_mu_);
  ReservationCache reservations_;
  SharedBuffer staging_;
  RegionKey staging_key_;
  Mutex staging_mu_;  // Held while staging_'s bytes are in use (its handle is set once).
  Mutex release_mu_;
  CondVar release_cv_;
  int releases_in_flight_ SLUICE_GUARDED_BY(release_mu_) = 0;
  Mutex watch_mu_;
  CondVar watch_cv_;
  std::shared_ptr<std::function<void(const StoreEvent&)>> handler_ SLUICE_GUARDED_BY(watch_mu_);
  std::unique_ptr<grpc::ClientContext> watch_ctx_ SLUICE_GUARDED_BY(watch_mu_);
  bool watch_stopping_ SLUICE_GUARDED_BY(watch_mu_) = false;
  std::thread watch_thread_;
};

}  // namespace sluice::internal

#endif  // SLUICE_STORE_CLIENT_STORE_CLIENT_IMPL_H_
