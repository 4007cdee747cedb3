// sluice/store/client.h
//
// StoreClient puts and gets immutable objects in the cluster-wide store.
// Metadata goes to the master over gRPC; bytes move between this process's
// transfer engine and the store nodes' memory (shm on the same host, tcp
// otherwise). Put is PutStart (the master places `replica_num` copies) ->
// writes -> PutEnd; readers never see a partial object.
//
// Zero-copy forms (PutFrom, GetInto) move bytes straight between the
// caller's registered buffer and the node; the others copy through one
// internal registered staging buffer.
//
// Thread safety: every method may be called from any thread. Calls block
// (they are the synchronous API); the staging forms serialize on the
// staging buffer.

#ifndef SLUICE_STORE_CLIENT_H_
#define SLUICE_STORE_CLIENT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/security.h"
#include "sluice/status.h"
#include "sluice/store/types.h"
#include "sluice/transfer/engine.h"

namespace sluice {

namespace internal {
class StoreClientImpl;
struct ObjectViewState;
}  // namespace internal

struct StoreClientConfig {
  std::string master;  // "host:port".
  // Where the master is now, asked when it cannot be reached (e.g. the
  // leader in etcd; at most every 500 ms): a different "host:port"
  // replaces `master` for the calls that follow (the fast lane and held
  // reservations are dropped). Empty answer or no function: keep trying
  // the same one. Called on the caller's threads; must be thread-safe.
  std::function<std::string()> resolve_master;
  std::chrono::milliseconds rpc_timeout{10000};
  std::chrono::milliseconds transfer_timeout{60000};
  std::uint64_t staging_bytes = std::uint64_t{64} << 20;  // For Put / Get.
  // Use the master's fast lane for put, get, exists and remove when it
  // offers one (else, and whenever the lane fails, those calls use gRPC).
  bool fast_lane = true;
  // How long a fast-lane caller spins on its socket before sleeping; trades
  // CPU for round-trip time. 0: never spin.
  std::chrono::microseconds rpc_spin{50};
  // When puts repeat one shape (size, replica count, preferred node), ask
  // the master to hold space for the next one with each commit: that put
  // is then one round trip (write, commit) instead of two. Costs at most one
  // held object's worth of memory per client, freed by the master when
  // unused for its ttl (5 s); the master declines when it would take memory
  // past the high watermark.
  bool reserve_puts = true;
  // How long put, get, exists and remove keep retrying while the master is
  // unreachable or has no store node for the object yet (a master restart:
  // nodes re-register within a heartbeat of its return), with backoff;
  // each try is bounded by rpc_timeout. 0: fail at once.
  std::chrono::milliseconds master_retry{30000};
  // The cluster credential and TLS (sluice/security.h). The engine passed to
  // Create must carry the matching transfer secret (TransferSecret).
  SecurityConfig security;
};

struct PutOptions {
  std::uint32_t replica_num = 1;
  LeasePolicy policy;
  std::optional<TensorMeta> tensor;
  std::string preferred_node;  // Node id or endpoint to place the first copy on.
  // Makes PutStart idempotent across retries; empty: one is generated.
  std::string request_id;
};

// A committed object read in place (StoreClient::GetInPlace): a same-host
// store node's memory mapped into this process, under a read lease. Read it,
// never write it. Move-only. The bytes are the object's while the lease
// holds: until End() or destruction, within the master's read lease timeout
// (MasterConfig::read_lease_timeout, 60 s by default; Renew() restarts
// it); End() says whether it held. The mapping itself outlives everything (reading never faults).
class ObjectView {
 public:
  ObjectView();
  ObjectView(ObjectView&&) noexcept;
  ObjectView& operator=(ObjectView&&) noexcept;
  // Ends the read as End() does, without waiting for the master's answer
  // (the client's destructor waits for it); never blocks.
  ~ObjectView();

  const void* data() const { return data_; }
  std::uint64_t size() const { return meta_.size; }
  const ObjectMeta& meta() const { return meta_; }

  // Ends the read (a completed one: delete-on-consume counts it) with one
  // round trip to the master. Idempotent: later calls return OK. Errors:
  // kDataLoss (the lease had ended first: held past the timeout, or the
  // master restarted; the bytes read may have changed meanwhile);
  // kFailedPrecondition (the client is gone: the lease ends by timeout);
  // kUnavailable (master unreachable: the lease ends by timeout). Blocks.
  Status End();
  // Restarts the lease's timeout: a reader holding the view longer than
  // the master's read lease timeout renews it at least once per timeout.
  // One round trip; blocks. Idempotent. Errors: kDataLoss (the lease had
  // already ended: the bytes may have changed; drop the view and read the
  // object again), kFailedPrecondition (the view has ended, or the client
  // is gone), kUnavailable (master unreachable: retry before the timeout).
  Status Renew();

 private:
  friend class internal::StoreClientImpl;
  std::shared_ptr<internal::ObjectViewState> state_;
  const void* data_ = nullptr;
  ObjectMeta meta_;
};

class StoreClient {
 public:
  // REQUIRES: `engine` outlives the client.
  // Errors: kInvalidArgument (bad master endpoint); kResourceExhausted (no
  // memory for the staging buffer).
  static Result<std::unique_ptr<StoreClient>> Create(TransferEngine* engine,
                                                     const StoreClientConfig& config);
  // A client of the master alone, without an engine, for a service that
  // watches and cleans up objects but never moves their bytes (the
  // orchestrator): Exists, Remove, WaitFor and Subscribe work as above;
  // every call that moves bytes answers kFailedPrecondition naming it, and
  // Warm does nothing. Errors: kInvalidArgument (bad master endpoint or
  // master_retry).
  static Result<std::unique_ptr<StoreClient>> CreateMetadataOnly(const StoreClientConfig& config);
  ~StoreClient();

  // Stores `len` bytes at `data` under `key`, written straight from `data`.
  // REQUIRES: [data, data+len) lies in memory registered with the engine and
  // is not modified until the call returns.
  // Errors: kInvalidArgument (empty/over-long key, zero or oversized length,
  // unregistered memory); kAlreadyExists (key committed or being written);
  // kResourceExhausted (no room even after eviction: back off and retry);
  // kUnavailable (master or node unreachable; retry with the same
  // options.request_id). On a failed write the put is revoked.
  Status PutFrom(std::string_view key, const void* data, std::size_t len,
                 const PutOptions& options = {});
  // As PutFrom, for any memory: copies through the staging buffer.
  Status Put(std::string_view key, std::span<const std::byte> value,
             const PutOptions& options = {});

  // Reads the object into `dst` (registered memory of at least the object's
  // size) from the nearest replica, trying the others if it fails. Holds a
  // read lease for the duration; the lease is released without waiting for
  // the master's answer, so a delete-on-consume deletion becomes visible a
  // moment after the call returns (the client's destructor waits for such
  // releases). Returns the object's size and tensor metadata.
  // Errors: kNotFound; kFailedPrecondition (still being written: WaitFor);
  // kInvalidArgument (`capacity` smaller than the object; the error names
  // the size needed); kUnavailable (every replica failed).
  Result<ObjectMeta> GetInto(std::string_view key, void* dst, std::size_t capacity);
  // As GetInto, into a new vector, through the staging buffer.
  Result<std::vector<std::byte>> Get(std::string_view key, ObjectMeta* meta = nullptr);

  // Errors: kNotFound; kFailedPrecondition (being written). Idempotent in
  // effect: a retry after success answers kNotFound.
  Status Remove(std::string_view key);
  // True if `key` is committed. Idempotent.
  Result<bool> Exists(std::string_view key);
  // Returns once `key` is committed (at once if it is), or
  // kDeadlineExceeded after `timeout`. Idempotent.
  Status WaitFor(std::string_view key, std::chrono::milliseconds timeout);
  // What the store holds now, as its master's directory has it: nodes,
  // objects, memory and disk bytes (capacity and used), and the cache
  // objects of each class with the class's budget. One call to the master
  // (no retry: a view to show, not state to act on). Errors: kUnavailable
  // (the master did not answer); kPermissionDenied (a credential its role
  // does not allow Describe).
  Result<StoreUsage> Usage();

  // Opens now what the first put or get would open on its way: the
  // master's channel and fast lane, and the engine's connection to every
  // store node registered now, with each node's shared memory mapped when
  // it is on this host (mapping a large segment takes ~0.1 s per GiB here).
  // Call before taking traffic, so the first request does not pay for it.
  // Blocks up to rpc_timeout per master call and transfer_timeout per node.
  // Errors: the master's (kUnavailable, kDeadlineExceeded), or the first
  // node that could not be reached (the others are warmed anyway); the
  // client stays usable either way. Idempotent.
  Status Warm();

  // Delivers object events (lost, expired, evicted, consumed) to `handler`
  // on a client thread until the client is destroyed; reconnects when the
  // master goes away. At most once: events while disconnected are missed.
  // Replaces a previous handler. The handler must not block for long.
  void Subscribe(std::function<void(const StoreEvent&)> handler);

  // Vectored forms: the object is the runs back to back (each run in
  // registered memory), moved as one batch with one op per run, no packing
  // copy. Errors as PutFrom / GetInto; GetIntoRuns also fails with
  // kInvalidArgument when the runs' total differs from the object's size.
  struct IoRun {
    void* data = nullptr;
    std::size_t len = 0;
  };
  Status PutFromRuns(std::string_view key, std::span<const IoRun> runs,
                     const PutOptions& options = {});
  // A `wait` above 0 lets a reader that arrives before the producer wait
  // that long for the commit inside the same call (else kNotFound /
  // kFailedPrecondition at once; kDeadlineExceeded when the wait ran out).
  Result<ObjectMeta> GetIntoRuns(std::string_view key, std::span<const IoRun> runs,
                                 std::chrono::milliseconds wait = std::chrono::milliseconds(0));
  // As GetIntoRuns, reading the runs in consecutive groups (`parts[i]` runs
  // each; the counts sum to runs.size()) and calling `landed(i)` on this
  // thread once group i has landed, in order: one lookup and one lease for
  // a reader that starts on the first group before the last arrives. On an
  // error no further group is read and `landed` is not called again.
  Result<ObjectMeta> GetIntoRunsInParts(std::string_view key, std::span<const IoRun> runs,
                                        std::span<const std::size_t> parts,
                                        std::chrono::milliseconds wait,
                                        const std::function<void(std::size_t)>& landed);

  // Reads `key` without copying it: maps the memory of a replica held by a
  // store node on this host and returns a view of it under a read lease
  // (see ObjectView). `wait` as for GetIntoRuns. Errors: kNotFound;
  // kFailedPrecondition (still being written; or no replica this process
  // can map, on another host or over tcp only: read it with GetInto);
  // kDeadlineExceeded (the wait ran out); kUnavailable.
  Result<ObjectView> GetInPlace(std::string_view key,
                                std::chrono::milliseconds wait = std::chrono::milliseconds(0));

  // Bytes copied through the staging buffer so far (Put and Get only; the
  // zero-copy forms copy nothing).
  std::uint64_t bytes_staged() const;

  // Batch forms: one status per item, items run concurrently.
  struct PutItem {
    std::string key;
    const void* data = nullptr;
    std::size_t len = 0;
    PutOptions options;
  };
  std::vector<Status> BatchPutFrom(std::span<const PutItem> items);
  struct GetItem {
    std::string key;
    void* dst = nullptr;
    std::size_t capacity = 0;
  };
  std::vector<Result<ObjectMeta>> BatchGetInto(std::span<const GetItem> items);

 private:
  explicit StoreClient(std::unique_ptr<internal::StoreClientImpl> impl);
  std::unique_ptr<internal::StoreClientImpl> impl_;
};

}  // namespace sluice

#endif  // SLUICE_STORE_CLIENT_H_
