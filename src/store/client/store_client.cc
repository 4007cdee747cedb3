#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "sluice/store/client.h"

#include "common/log.h"
#include "common/net.h"
#include "common/random.h"
#include "common/rpc_status.h"
#include "proto/master.grpc.pb.h"
#include "store/client/reservation_cache.h"
#include "store/fastlane/client.h"
#include "store/proto_convert.h"

namespace sluice::internal {

namespace pb = ::sluice::store::v1;

class StoreClientImpl {
 public:
  StoreClientImpl(TransferEngine* engine, StoreClientConfig config)
      : engine_(engine), config_(std::move(config)) {}

  ~StoreClientImpl() {
    StopWatching();
    {
      // Lease releases still in flight finish first (each has a deadline),
      // so a Get followed by exit still counts as a completed read.
      std::unique_lock<std::mutex> lock(release_mu_);
      release_cv_.wait(lock, [this] { return releases_in_flight_ == 0; });
    }
    if (staging_key_.value != 0) {
      (void)engine_->UnregisterMemory(staging_key_);
    }
  }

  Status Init() {
    SLUICE_RETURN_IF_ERROR(ParseHostPort(config_.master, false).status());
    if (config_.staging_bytes < 4096) {
      return InvalidArgumentError("store client: staging_bytes must be at least 4 KiB");
    }
    SLUICE_ASSIGN_OR_RETURN(staging_, engine_->AllocateShared(config_.staging_bytes));
    SLUICE_ASSIGN_OR_RETURN(
        staging_key_, engine_->RegisterMemory(staging_.data(), staging_.size(), MemoryKind::kHost,
                                              Access::kLocalOnly));
    stub_ = pb::Master::NewStub(
        grpc::CreateChannel(config_.master, grpc::InsecureChannelCredentials()));
    return Status::Ok();
  }

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

  Result<OpenPut> PutStart(std::string_view key, std::size_t len, const PutOptions& o) {
    pb::PutStartRequest req;
    req.set_key(std::string(key));
    req.set_size(len);
    FillPutFields(o, &req);
    req.set_replica_num(o.replica_num);
    req.set_preferred_node(o.preferred_node);
    pb::PutStartResponse resp;
    SLUICE_RETURN_IF_ERROR(
        Call(&pb::Master::Stub::PutStart, fastlane::Method::kPutStart, req, &resp, "PutStart"));
    OpenPut put{std::string(key), resp.put_id(), {}};
    for (const pb::Replica& r : resp.replicas()) {
      Result<SegmentId> seg = engine_->OpenSegment(r.endpoint());
      if (!seg.ok()) {
        Revoke(put);
        return seg.status().WithContext("put '" + put.key + "': store node " + r.endpoint());
      }
      put.replicas.emplace_back(*seg, FromProto(r));
    }
    return put;
  }

  // Writes [local, local+len) at `object_offset` of every replica.
  Status WriteRange(const OpenPut& put, const char* local, std::uint64_t object_offset,
                    std::uint64_t len) {
    return engine_->TransferSync(WriteOps(put, local, object_offset, len),
                                 config_.transfer_timeout);
  }

  void Revoke(const OpenPut& put) {
    pb::PutRevokeRequest req;
    req.set_key(put.key);
    req.set_put_id(put.put_id);
    pb::PutRevokeResponse resp;
    // Best effort: the put also times out.
    (void)Call(&pb::Master::Stub::PutRevoke, fastlane::Method::kPutRevoke, req, &resp, "PutRevoke");
  }

  // Commits `put` (PutEnd), or revokes it when `written` failed. With
  // `next`, the commit asks for a reservation for the client's next put,
  // which is kept when offered.
  Status FinishPut(const OpenPut& put, Status written,
                   const std::optional<pb::ReserveNext>& next = std::nullopt,
                   const std::shared_ptr<fastlane::Client>& lane = nullptr) {
    if (!written.ok()) {
      Revoke(put);
      return written.WithContext("put '" + put.key + "'");
    }
    pb::PutEndRequest req;
    req.set_key(put.key);
    req.set_put_id(put.put_id);
    if (next.has_value()) {
      *req.mutable_reserve() = *next;
    }
    pb::PutEndResponse resp;
    SLUICE_RETURN_IF_ERROR(
        Call(&pb::Master::Stub::PutEnd, fastlane::Method::kPutEnd, req, &resp, "PutEnd"));
    if (next.has_value()) {
      KeepReservation(lane, resp.reservation(), *next);
    }
    return Status::Ok();
  }

  // Puts `len` bytes under `key`; `write(const OpenPut&) -> Status` writes
  // them into every replica of the put it is given. Over a held reservation
  // in one round trip when one fits, else PutStart + write + PutEnd. Either
  // commit asks for a reservation for the next put when puts repeat a shape.
  template <typename Write>
  Status DoPut(std::string_view key, std::uint64_t len, const PutOptions& o, const Write& write) {
    const PutShape shape{len, std::max<std::uint32_t>(1, o.replica_num), o.preferred_node};
    // Reservations ride on the fast lane only: its open connection shows
    // that the master which granted one still runs (a restarted master may
    // have given the space away).
    std::shared_ptr<fastlane::Client> lane = config_.reserve_puts ? FastLane() : nullptr;
    std::vector<std::uint64_t> release;
    std::optional<HeldReservation> held =
        lane != nullptr ? reservations_.Take(shape, std::chrono::steady_clock::now(), &release)
                        : std::nullopt;
    if (held.has_value() && !lane->IdleConnectionAlive()) {
      held.reset();
      reservations_.Clear();
      release.clear();
    }
    Unreserve(lane, release);
    std::optional<pb::ReserveNext> next;
    if (lane != nullptr && reservations_.NotePut(shape)) {
      next.emplace();
      next->set_size(shape.size);
      next->set_replica_num(shape.replica_num);
      next->set_preferred_node(shape.preferred_node);
    }
    if (held.has_value()) {
      std::optional<Status> done = PutOverReservation(lane, std::move(*held), key, o, write, next);
      if (done.has_value()) {
        return *done;
      }
    }
    SLUICE_ASSIGN_OR_RETURN(OpenPut put, PutStart(key, len, o));
    return FinishPut(put, write(put), next, lane);
  }

  // The one-round-trip put: writes into `held` and commits with PutReserved
  // (asking for the next reservation with `next`). nullopt when the caller
  // should put the long way: the reservation is gone (expired, node lost)
  // or the write failed (the long way then reports errors properly).
  template <typename Write>
  std::optional<Status> PutOverReservation(const std::shared_ptr<fastlane::Client>& lane,
                                           HeldReservation held, std::string_view key,
                                           const PutOptions& o, const Write& write,
                                           const std::optional<pb::ReserveNext>& next) {
    OpenPut put{std::string(key), held.id, std::move(held.replicas)};
    if (!write(put).ok()) {
      Unreserve(lane, {put.put_id});
      return std::nullopt;
    }
    pb::PutReservedRequest req;
    req.set_key(put.key);
    req.set_reservation_id(put.put_id);
    req.set_size(held.shape.size);
    FillPutFields(o, &req);
    if (next.has_value()) {
      *req.mutable_reserve() = *next;
    }
    pb::PutReservedResponse resp;
    const Status s = Call(&pb::Master::Stub::PutReserved, fastlane::Method::kPutReserved, req,
                          &resp, "PutReserved");
    if (s.ok()) {
      if (next.has_value()) {
        KeepReservation(lane, resp.reservation(), *next);
      }
      return Status::Ok();
    }
    if (s.code() == StatusCode::kNotFound) {
      return std::nullopt;
    }
    return s.WithContext("put '" + put.key + "'");
  }

  // Releases reservations this client gives up, one way (no answer awaited;
  // if it is lost the master frees them after their ttl).
  void Unreserve(const std::shared_ptr<fastlane::Client>& lane,
                 const std::vector<std::uint64_t>& ids) {
    if (lane == nullptr || ids.empty()) {
      return;
    }
    pb::UnreserveRequest req;
    for (std::uint64_t id : ids) {
      req.add_reservation_ids(id);
    }
    (void)lane->Send(fastlane::Method::kUnreserve, req.SerializeAsString(), config_.rpc_timeout);
  }

  // Keeps a reservation offered for `asked` (none when the master declined).
  void KeepReservation(const std::shared_ptr<fastlane::Client>& lane, const pb::Reservation& r,
                       const pb::ReserveNext& asked) {
    if (r.reservation_id() == 0) {
      return;
    }
    const PutShape shape{asked.size(), asked.replica_num(), asked.preferred_node()};
    if (r.size() != shape.size || r.replicas_size() != static_cast<int>(shape.replica_num)) {
      Unreserve(lane, {r.reservation_id()});
      return;
    }
    HeldReservation h;
    h.shape = shape;
    h.id = r.reservation_id();
    for (const pb::Replica& rep : r.replicas()) {
      Result<SegmentId> seg = engine_->OpenSegment(rep.endpoint());
      if (!seg.ok()) {
        Unreserve(lane, {r.reservation_id()});
        return;
      }
      h.replicas.emplace_back(*seg, FromProto(rep));
    }
    // Used only in the first fifth of its ttl, so that a write started then
    // ends long before the master frees the space.
    h.usable_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(r.ttl_ms()) / 5;
    std::vector<std::uint64_t> release;
    reservations_.Keep(std::move(h), &release);
    Unreserve(lane, release);
  }

  Status PutFrom(std::string_view key, const void* data, std::size_t len, const PutOptions& o) {
    if (data == nullptr) {
      return InvalidArgumentError("PutFrom: null data");
    }
    return DoPut(key, len, o, [&](const OpenPut& put) {
      return WriteRange(put, static_cast<const char*>(data), 0, len);
    });
  }

  Status Put(std::string_view key, std::span<const std::byte> value, const PutOptions& o) {
    return DoPut(key, value.size(), o, [&](const OpenPut& put) {
      std::lock_guard<std::mutex> lock(staging_mu_);
      char* stage = static_cast<char*>(staging_.data());
      Status s;
      for (std::uint64_t off = 0; s.ok() && off < value.size(); off += staging_.size()) {
        const std::uint64_t n = std::min<std::uint64_t>(staging_.size(), value.size() - off);
        std::memcpy(stage, value.data() + off, n);
        bytes_staged_.fetch_add(n, std::memory_order_relaxed);
        s = WriteRange(put, stage, off, n);
      }
      return s;
    });
  }

  Status PutFromRuns(std::string_view key, std::span<const StoreClient::IoRun> runs,
                     const PutOptions& o) {
    std::uint64_t total = 0;
    for (const auto& r : runs) {
      if (r.data == nullptr || r.len == 0) {
        return InvalidArgumentError("PutFromRuns: null or empty run");
      }
      total += r.len;
    }
    return DoPut(key, total, o, [&](const OpenPut& put) {
      std::vector<TransferRequest> ops;
      ops.reserve(runs.size() * put.replicas.size());
      std::uint64_t at = 0;
      for (const auto& r : runs) {
        for (TransferRequest& op : WriteOps(put, r.data, at, r.len)) {
          ops.push_back(op);
        }
        at += r.len;
      }
      return engine_->TransferSync(ops, config_.transfer_timeout);
    });
  }

  Result<ObjectMeta> GetIntoRunsInParts(std::string_view key,
                                        std::span<const StoreClient::IoRun> runs,
                                        std::span<const std::size_t> parts,
                                        std::chrono::milliseconds wait,
                                        const std::function<void(std::size_t)>& landed) {
    std::uint64_t total = 0;
    for (const auto& r : runs) {
      if (r.data == nullptr || r.len == 0) {
        return InvalidArgumentError("GetIntoRuns: null or empty run");
      }
      total += r.len;
    }
    std::size_t grouped = 0;
    for (std::size_t n : parts) {
      grouped += n;
    }
    if (grouped != runs.size()) {
      return InvalidArgumentError("GetIntoRunsInParts: parts hold " + std::to_string(grouped) +
                                  " runs of " + std::to_string(runs.size()));
    }
    SLUICE_ASSIGN_OR_RETURN(OpenGet g, GetStart(key, wait));
    if (g.meta.size != total) {
      GetEnd(g, false);
      return InvalidArgumentError("GetIntoRuns: object '" + g.key + "' has " +
                                  std::to_string(g.meta.size) + " bytes; the runs hold " +
                                  std::to_string(total));
    }
    const Status s = parts.size() == 1 ? ReadRuns(g, runs, 0) : ReadParts(g, runs, parts, landed);
    GetEnd(g, s.ok());
    if (!s.ok()) {
      return s;
    }
    if (parts.size() == 1 && landed) {
      landed(0);
    }
    return g.meta;
  }

  struct OpenGet {
    std::string key;
    std::uint64_t lease_id = 0;
    ObjectMeta meta;
    std::vector<ReplicaLocation> replicas;
  };

  Result<OpenGet> GetStart(std::string_view key,
                           std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
    pb::GetStartRequest req;
    req.set_key(std::string(key));
    req.set_client_endpoint(engine_->endpoint());
    req.set_wait_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(0, wait.count())));
    pb::GetStartResponse resp;
    SLUICE_RETURN_IF_ERROR(Call(&pb::Master::Stub::GetStart, fastlane::Method::kGetStart, req,
                                &resp, "GetStart", config_.rpc_timeout + wait));
    OpenGet g{std::string(key), resp.lease_id(), {resp.size(), std::nullopt}, {}};
    if (resp.has_tensor()) {
      g.meta.tensor = FromProto(resp.tensor());
    }
    for (const pb::Replica& r : resp.replicas()) {
      g.replicas.push_back(FromProto(r));
    }
    return g;
  }

  // Ends the read lease without waiting for the answer: the reader's bytes
  // have landed, and a lost GetEnd only delays the lease's timeout.
  void GetEnd(const OpenGet& g, bool completed) {
    if (std::shared_ptr<fastlane::Client> lane = FastLane()) {
      pb::GetEndRequest req;
      req.set_key(g.key);
      req.set_lease_id(g.lease_id);
      req.set_completed(completed);
      if (lane->Send(fastlane::Method::kGetEnd, req.SerializeAsString(), config_.rpc_timeout)) {
        return;
      }
      LaneFailed(lane, UnavailableError("send failed", FailureScope::kEndpoint));
    }
    struct Call {
      grpc::ClientContext ctx;
      pb::GetEndRequest req;
      pb::GetEndResponse resp;
    };
    auto* call = new Call;
    call->req.set_key(g.key);
    call->req.set_lease_id(g.lease_id);
    call->req.set_completed(completed);
    SetDeadline(&call->ctx, config_.rpc_timeout);
    {
      std::lock_guard<std::mutex> lock(release_mu_);
      ++releases_in_flight_;
    }
    stub_->async()->GetEnd(&call->ctx, &call->req, &call->resp, [this, call](const grpc::Status&) {
      delete call;
      std::lock_guard<std::mutex> lock(release_mu_);
      if (--releases_in_flight_ == 0) {
        release_cv_.notify_all();
      }
    });
  }

  // Reads [object_offset, +len) into `local`, nearest replica first.
  Status ReadRange(const OpenGet& g, char* local, std::uint64_t object_offset, std::uint64_t len) {
    const StoreClient::IoRun run{local, len};
    return ReadRuns(g, {&run, 1}, object_offset);
  }

  // Reads the object from `object_offset` on into `runs` back to back, as
  // one batch, nearest replica first, trying the next when one fails.
  Status ReadRuns(const OpenGet& g, std::span<const StoreClient::IoRun> runs,
                  std::uint64_t object_offset) {
    Status last =
        UnavailableError("object '" + g.key + "' has no replica", FailureScope::kEndpoint);
    std::vector<TransferRequest> ops;
    ops.reserve(runs.size());
    for (const ReplicaLocation& r : g.replicas) {
      Result<SegmentId> seg = engine_->OpenSegment(r.endpoint);
      if (!seg.ok()) {
        last = seg.status();
        continue;
      }
      ops.clear();
      std::uint64_t at = r.offset + object_offset;
      for (const auto& run : runs) {
        ops.push_back(TransferRequest{OpKind::kRead, run.data, *seg, RegionKey{r.region_key}, at,
                                      run.len, TransportHint::kAuto});
        at += run.len;
      }
      last = engine_->TransferSync(ops, config_.transfer_timeout);
      if (last.ok() || last.scope() == FailureScope::kRequest) {
        return last;  // Done, or an error another replica would repeat.
      }
    }
    return last.WithContext("get '" + g.key + "'");
  }

  // Reads `runs` from the nearest replica as one batch per part, all in
  // flight at once, calling `landed(i)` as part i lands, in order. Returns
  // only once no batch writes into `runs` any more.
  Status ReadParts(const OpenGet& g, std::span<const StoreClient::IoRun> runs,
                   std::span<const std::size_t> parts,
                   const std::function<void(std::size_t)>& landed) {
    if (g.replicas.empty()) {
      return UnavailableError("object '" + g.key + "' has no replica", FailureScope::kEndpoint);
    }
    const ReplicaLocation& r = g.replicas.front();
    SLUICE_ASSIGN_OR_RETURN(SegmentId seg, engine_->OpenSegment(r.endpoint));
    std::vector<std::shared_ptr<TransferBatch>> batches;
    std::vector<TransferRequest> ops;
    Status s;
    std::size_t first = 0;
    std::uint64_t at = r.offset;
    for (std::size_t i = 0; i < parts.size() && s.ok(); ++i) {
      ops.clear();
      for (const auto& run : runs.subspan(first, parts[i])) {
        ops.push_back(TransferRequest{OpKind::kRead, run.data, seg, RegionKey{r.region_key}, at,
                                      run.len, TransportHint::kAuto});
        at += run.len;
      }
      first += parts[i];
      Result<std::shared_ptr<TransferBatch>> b = engine_->Submit(ops);
      if (b.ok()) {
        batches.push_back(std::move(*b));
      } else {
        s = b.status();
      }
    }
    for (std::size_t i = 0; i < batches.size(); ++i) {
      const Status w = batches[i]->Wait(config_.transfer_timeout);
      if (s.ok() && !w.ok()) {
        s = w;
      }
      if (s.ok() && landed) {
        landed(i);
      }
    }
    return s.ok() ? s : s.WithContext("get '" + g.key + "'");
  }

  Result<ObjectMeta> GetInto(std::string_view key, void* dst, std::size_t capacity) {
    if (dst == nullptr) {
      return InvalidArgumentError("GetInto: null destination");
    }
    SLUICE_ASSIGN_OR_RETURN(OpenGet g, GetStart(key));
    if (g.meta.size > capacity) {
      GetEnd(g, false);
      return InvalidArgumentError("GetInto: object '" + g.key + "' has " +
                                  std::to_string(g.meta.size) + " bytes; the buffer holds " +
                                  std::to_string(capacity));
    }
    Status s = ReadRange(g, static_cast<char*>(dst), 0, g.meta.size);
    GetEnd(g, s.ok());
    if (!s.ok()) {
      return s;
    }
    return g.meta;
  }

  Result<std::vector<std::byte>> Get(std::string_view key, ObjectMeta* meta) {
    SLUICE_ASSIGN_OR_RETURN(OpenGet g, GetStart(key));
    std::vector<std::byte> out(g.meta.size);
    Status s;
    {
      std::lock_guard<std::mutex> lock(staging_mu_);
      char* stage = static_cast<char*>(staging_.data());
      for (std::uint64_t off = 0; s.ok() && off < out.size(); off += staging_.size()) {
        const std::uint64_t n = std::min<std::uint64_t>(staging_.size(), out.size() - off);
        s = ReadRange(g, stage, off, n);
        if (s.ok()) {
          std::memcpy(out.data() + off, stage, n);
          bytes_staged_.fetch_add(n, std::memory_order_relaxed);
        }
      }
    }
    GetEnd(g, s.ok());
    if (!s.ok()) {
      return s;
    }
    if (meta != nullptr) {
      *meta = g.meta;
    }
    return out;
  }

  Status Remove(std::string_view key) {
    pb::KeyRequest req;
    req.set_key(std::string(key));
    pb::RemoveResponse resp;
    return Call(&pb::Master::Stub::Remove, fastlane::Method::kRemove, req, &resp, "Remove");
  }

  Result<bool> Exists(std::string_view key) {
    pb::KeyRequest req;
    req.set_key(std::string(key));
    pb::ExistsResponse resp;
    SLUICE_RETURN_IF_ERROR(
        Call(&pb::Master::Stub::Exists, fastlane::Method::kExists, req, &resp, "Exists"));
    return resp.exists();
  }

  Status WaitFor(std::string_view key, std::chrono::milliseconds timeout) {
    pb::WaitForRequest req;
    req.set_key(std::string(key));
    req.set_timeout_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(0, timeout.count())));
    pb::WaitForResponse resp;
    return Call(&pb::Master::Stub::WaitFor, fastlane::Method::kWaitFor, req, &resp, "WaitFor",
                timeout + config_.rpc_timeout);
  }

  std::vector<Status> BatchPutFrom(std::span<const StoreClient::PutItem> items) {
    std::vector<Status> out(items.size());
    std::vector<std::optional<OpenPut>> puts(items.size());
    std::vector<std::shared_ptr<TransferBatch>> batches(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& it = items[i];
      Result<OpenPut> p = it.data == nullptr ? Result<OpenPut>(InvalidArgumentError("null data"))
                                             : PutStart(it.key, it.len, it.options);
      if (!p.ok()) {
        out[i] = p.status();
        continue;
      }
      puts[i] = std::move(*p);
      auto b = engine_->Submit(WriteOps(*puts[i], it.data, 0, it.len));
      if (b.ok()) {
        batches[i] = *b;
      } else {
        out[i] = b.status();
      }
    }
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!puts[i].has_value()) {
        continue;
      }
      Status written = batches[i] ? batches[i]->Wait(config_.transfer_timeout) : out[i];
      out[i] = FinishPut(*puts[i], written);
    }
    return out;
  }

  std::vector<Result<ObjectMeta>> BatchGetInto(std::span<const StoreClient::GetItem> items) {
    std::vector<Result<ObjectMeta>> out;
    out.reserve(items.size());
    std::vector<std::optional<OpenGet>> gets(items.size());
    std::vector<std::shared_ptr<TransferBatch>> batches(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      out.emplace_back(InternalError("not run"));
      const auto& it = items[i];
      Result<OpenGet> g = GetStart(it.key);
      if (!g.ok()) {
        out[i] = g.status();
        continue;
      }
      if (g->meta.size > it.capacity || it.dst == nullptr || g->replicas.empty()) {
        GetEnd(*g, false);
        out[i] = InvalidArgumentError("GetInto '" + it.key + "': buffer of " +
                                      std::to_string(it.capacity) + " bytes for " +
                                      std::to_string(g->meta.size) + " (or no replica)");
        continue;
      }
      gets[i] = std::move(*g);
      const ReplicaLocation& r = gets[i]->replicas.front();
      Result<SegmentId> seg = engine_->OpenSegment(r.endpoint);
      if (seg.ok()) {
        TransferRequest op{OpKind::kRead,           it.dst,   *seg,
                           RegionKey{r.region_key}, r.offset, gets[i]->meta.size,
                           TransportHint::kAuto};
        auto b = engine_->Submit({&op, 1});
        if (b.ok()) {
          batches[i] = *b;
        }
      }
    }
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!gets[i].has_value()) {
        continue;
      }
      Status s = batches[i]
                     ? batches[i]->Wait(config_.transfer_timeout)
                     : UnavailableError("first replica unreachable", FailureScope::kEndpoint);
      if (!s.ok() && s.scope() != FailureScope::kRequest) {
        s = ReadRange(*gets[i], static_cast<char*>(items[i].dst), 0, gets[i]->meta.size);
      }
      GetEnd(*gets[i], s.ok());
      out[i] = s.ok() ? Result<ObjectMeta>(gets[i]->meta) : Result<ObjectMeta>(s);
    }
    return out;
  }

  void Subscribe(std::function<void(const StoreEvent&)> handler) {
    std::lock_guard<std::mutex> lock(watch_mu_);
    handler_ = std::make_shared<std::function<void(const StoreEvent&)>>(std::move(handler));
    if (!watch_thread_.joinable()) {
      watch_thread_ = std::thread([this] { WatchLoop(); });
    }
  }

 private:
  // Reads the event stream; reopens it (every 200 ms) while the master is away.
  void WatchLoop() {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(watch_mu_);
        if (watch_stopping_) {
          return;
        }
        watch_ctx_ = std::make_unique<grpc::ClientContext>();
      }
      pb::WatchRequest req;
      auto reader = stub_->WatchEvents(watch_ctx_.get(), req);
      pb::ObjectEvent e;
      while (reader->Read(&e)) {
        std::shared_ptr<std::function<void(const StoreEvent&)>> h;
        {
          std::lock_guard<std::mutex> lock(watch_mu_);
          h = handler_;
        }
        (*h)(StoreEvent{static_cast<StoreEventKind>(e.kind()), e.key()});
      }
      (void)reader->Finish();
      std::unique_lock<std::mutex> lock(watch_mu_);
      watch_cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return watch_stopping_; });
    }
  }

  void StopWatching() {
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      watch_stopping_ = true;
      if (watch_ctx_ != nullptr) {
        watch_ctx_->TryCancel();
      }
    }
    watch_cv_.notify_all();
    if (watch_thread_.joinable()) {
      watch_thread_.join();
    }
  }

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
    return FromGrpc((stub_.get()->*method)(&ctx, req, resp), name);
  }
  // As above, over the fast lane when there is one; falls back to gRPC when
  // the lane fails (every lane method is retry-safe, see master.proto).
  template <typename Req, typename Resp>
  Status Call(grpc::Status (pb::Master::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
              fastlane::Method fast, const Req& req, Resp* resp, std::string_view name) {
    return Call(method, fast, req, resp, name, config_.rpc_timeout);
  }
  template <typename Req, typename Resp>
  Status Call(grpc::Status (pb::Master::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
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

  // The fast lane, once the master has said where it is; asks again at most
  // once a second while it is unknown or after it failed.
  std::shared_ptr<fastlane::Client> FastLane() {
    if (!config_.fast_lane) {
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(lane_mu_);
    if (lane_ != nullptr) {
      return lane_;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now < next_lane_probe_) {
      return nullptr;
    }
    next_lane_probe_ = now + std::chrono::seconds(1);
    pb::DescribeRequest req;
    pb::DescribeResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, std::min(config_.rpc_timeout, std::chrono::milliseconds(1000)));
    if (!stub_->Describe(&ctx, req, &resp).ok() || resp.fast_lane_endpoint().empty()) {
      return nullptr;
    }
    Result<HostPort> hp = ParseHostPort(resp.fast_lane_endpoint(), false);
    if (!hp.ok()) {
      SLUICE_LOG(warn, "store client: master offers a bad fast lane '{}'",
                 resp.fast_lane_endpoint());
      return nullptr;
    }
    lane_ = std::make_shared<fastlane::Client>(*hp, config_.rpc_spin, 64);
    return lane_;
  }

  // Drops a failed lane (its connections are stale); the next call asks the
  // master again after the probe interval.
  void LaneFailed(const std::shared_ptr<fastlane::Client>& lane, const Status& why) {
    lane->Reset();
    std::lock_guard<std::mutex> lock(lane_mu_);
    if (lane_ == lane) {
      SLUICE_LOG(info, "store client: fast lane {} failed ({}); using gRPC",
                 lane->endpoint().ToString(), why.ToString());
      lane_ = nullptr;
      reservations_.Clear();  // The master may have restarted: they may be gone.
      next_lane_probe_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
  }

  // One write per replica of `put`: [local, local+len) to `object_offset`.
  static std::vector<TransferRequest> WriteOps(const OpenPut& put, const void* local,
                                               std::uint64_t object_offset, std::uint64_t len) {
    std::vector<TransferRequest> ops;
    ops.reserve(put.replicas.size());
    for (const auto& [seg, loc] : put.replicas) {
      ops.push_back(TransferRequest{OpKind::kWrite, const_cast<void*>(local), seg,
                                    RegionKey{loc.region_key}, loc.offset + object_offset, len,
                                    TransportHint::kAuto});
    }
    return ops;
  }

  TransferEngine* engine_;
  StoreClientConfig config_;

 public:
  std::atomic<std::uint64_t> bytes_staged_{0};

 private:
  std::unique_ptr<pb::Master::Stub> stub_;
  std::mutex lane_mu_;
  std::shared_ptr<fastlane::Client> lane_;                 // Guarded by lane_mu_.
  std::chrono::steady_clock::time_point next_lane_probe_;  // Guarded by lane_mu_.
  ReservationCache reservations_;
  SharedBuffer staging_;
  RegionKey staging_key_;
  std::mutex staging_mu_;
  std::mutex release_mu_;
  std::condition_variable release_cv_;
  int releases_in_flight_ = 0;  // Guarded by release_mu_.

  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::shared_ptr<std::function<void(const StoreEvent&)>> handler_;  // Guarded by watch_mu_.
  std::unique_ptr<grpc::ClientContext> watch_ctx_;                   // Guarded by watch_mu_.
  bool watch_stopping_ = false;                                      // Guarded by watch_mu_.
  std::thread watch_thread_;
};

}  // namespace sluice::internal

namespace sluice {

StoreClient::StoreClient(std::unique_ptr<internal::StoreClientImpl> impl)
    : impl_(std::move(impl)) {}
StoreClient::~StoreClient() = default;

Result<std::unique_ptr<StoreClient>> StoreClient::Create(TransferEngine* engine,
                                                         const StoreClientConfig& config) {
  if (engine == nullptr) {
    return InvalidArgumentError("store client: engine is required");
  }
  auto impl = std::make_unique<internal::StoreClientImpl>(engine, config);
  SLUICE_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<StoreClient>(new StoreClient(std::move(impl)));
}

Status StoreClient::PutFrom(std::string_view key, const void* data, std::size_t len,
                            const PutOptions& options) {
  return impl_->PutFrom(key, data, len, options);
}
Status StoreClient::Put(std::string_view key, std::span<const std::byte> value,
                        const PutOptions& options) {
  return impl_->Put(key, value, options);
}
Result<ObjectMeta> StoreClient::GetInto(std::string_view key, void* dst, std::size_t capacity) {
  return impl_->GetInto(key, dst, capacity);
}
Result<std::vector<std::byte>> StoreClient::Get(std::string_view key, ObjectMeta* meta) {
  return impl_->Get(key, meta);
}
Status StoreClient::Remove(std::string_view key) {
  return impl_->Remove(key);
}
Result<bool> StoreClient::Exists(std::string_view key) {
  return impl_->Exists(key);
}
Status StoreClient::WaitFor(std::string_view key, std::chrono::milliseconds timeout) {
  return impl_->WaitFor(key, timeout);
}
void StoreClient::Subscribe(std::function<void(const StoreEvent&)> handler) {
  impl_->Subscribe(std::move(handler));
}
Status StoreClient::PutFromRuns(std::string_view key, std::span<const IoRun> runs,
                                const PutOptions& options) {
  return impl_->PutFromRuns(key, runs, options);
}
Result<ObjectMeta> StoreClient::GetIntoRuns(std::string_view key, std::span<const IoRun> runs,
                                            std::chrono::milliseconds wait) {
  const std::size_t all = runs.size();
  return impl_->GetIntoRunsInParts(key, runs, {&all, 1}, wait, nullptr);
}
Result<ObjectMeta> StoreClient::GetIntoRunsInParts(std::string_view key,
                                                   std::span<const IoRun> runs,
                                                   std::span<const std::size_t> parts,
                                                   std::chrono::milliseconds wait,
                                                   const std::function<void(std::size_t)>& landed) {
  return impl_->GetIntoRunsInParts(key, runs, parts, wait, landed);
}
std::uint64_t StoreClient::bytes_staged() const {
  return impl_->bytes_staged_.load(std::memory_order_relaxed);
}
std::vector<Status> StoreClient::BatchPutFrom(std::span<const PutItem> items) {
  return impl_->BatchPutFrom(items);
}
std::vector<Result<ObjectMeta>> StoreClient::BatchGetInto(std::span<const GetItem> items) {
  return impl_->BatchGetInto(items);
}

}  // namespace sluice
