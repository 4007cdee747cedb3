#include "common/log.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/rpc_auth.h"
#include "common/security_keys.h"
#include "store/client/store_client_impl.h"

namespace sluice::internal {

StoreClientImpl::~StoreClientImpl() {
  link_->Detach();  // Live ObjectViews stop calling in.
  StopWatching();
  {
    // Lease releases still in flight finish first (each has a deadline),
    // so a Get followed by exit still counts as a completed read.
    MutexLock lock(release_mu_);
    release_cv_.Wait(lock,
                     [this]() SLUICE_REQUIRES(release_mu_) { return releases_in_flight_ == 0; });
  }
  if (engine_ != nullptr && staging_key_.value != 0) {
    (void)engine_->UnregisterMemory(staging_key_);
  }
}

Status StoreClientImpl::Init() {
  SLUICE_RETURN_IF_ERROR(ParseHostPort(config_.master, false).status());
  if (config_.staging_bytes < 4096) {
    return InvalidArgumentError("store client: staging_bytes must be at least 4 KiB");
  }
  if (config_.master_retry.count() < 0) {
    return InvalidArgumentError("store client: master_retry must be >= 0");
  }
  if (engine_ != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(staging_, engine_->AllocateShared(config_.staging_bytes));
    SLUICE_ASSIGN_OR_RETURN(
        staging_key_, engine_->RegisterMemory(staging_.data(), staging_.size(), MemoryKind::kHost,
                                              Access::kLocalOnly));
  }
  MutexLock lock(master_mu_);
  master_ = config_.master;
  stub_ = pb::Master::NewStub(MakeChannel(master_, config_.security));
  return Status::Ok();
}

void StoreClientImpl::Reresolve() {
  if (!config_.resolve_master) {
    return;
  }
  MutexLock resolving(resolve_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now < next_resolve_) {
    return;
  }
  next_resolve_ = now + std::chrono::milliseconds(500);
  const std::string found = config_.resolve_master();
  if (found.empty() || !ParseHostPort(found, false).ok()) {
    return;
  }
  {
    MutexLock lock(master_mu_);
    if (found == master_) {
      return;
    }
    SLUICE_LOG(info, "store client: the master moved from {} to {}", master_, found);
    master_ = found;
    stub_ = pb::Master::NewStub(MakeChannel(master_, config_.security));
  }
  MutexLock lock(lane_mu_);
  if (lane_ != nullptr) {
    lane_->Reset();
    lane_ = nullptr;
  }
  reservations_.Clear();
  next_lane_probe_ = now;  // Ask the new master for its lane at the next call.
}

Status StoreClientImpl::Remove(std::string_view key) {
  pb::KeyRequest req;
  req.set_key(std::string(key));
  pb::RemoveResponse resp;
  return Call(&pb::Master::Stub::Remove, fastlane::Method::kRemove, req, &resp, "Remove");
}

Result<bool> StoreClientImpl::Exists(std::string_view key) {
  pb::KeyRequest req;
  req.set_key(std::string(key));
  pb::ExistsResponse resp;
  SLUICE_RETURN_IF_ERROR(
      Call(&pb::Master::Stub::Exists, fastlane::Method::kExists, req, &resp, "Exists"));
  return resp.exists();
}

Result<StoreUsage> StoreClientImpl::Usage() {
  pb::DescribeRequest req;
  req.set_usage(true);
  pb::DescribeResponse resp;
  SLUICE_RETURN_IF_ERROR(
      Call(&pb::Master::Stub::Describe, req, &resp, "Describe", config_.rpc_timeout));
  const pb::StoreUsage& u = resp.usage();
  StoreUsage out;
  out.nodes = u.nodes();
  out.objects = u.objects();
  out.memory_capacity_bytes = u.memory_capacity_bytes();
  out.memory_used_bytes = u.memory_used_bytes();
  out.disk_capacity_bytes = u.disk_capacity_bytes();
  out.disk_used_bytes = u.disk_used_bytes();
  for (const auto& [name, c] : u.cache_classes()) {
    out.cache_classes[name] = {c.objects(), c.bytes(), c.budget_bytes()};
  }
  return out;
}

Status StoreClientImpl::WaitFor(std::string_view key, std::chrono::milliseconds timeout) {
  pb::WaitForRequest req;
  req.set_key(std::string(key));
  req.set_timeout_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(0, timeout.count())));
  pb::WaitForResponse resp;
  return Call(&pb::Master::Stub::WaitFor, fastlane::Method::kWaitFor, req, &resp, "WaitFor",
              timeout + config_.rpc_timeout);
}

void StoreClientImpl::Subscribe(std::function<void(const StoreEvent&)> handler) {
  MutexLock lock(watch_mu_);
  handler_ = std::make_shared<std::function<void(const StoreEvent&)>>(std::move(handler));
  if (!watch_thread_.joinable()) {
    watch_thread_ = std::thread([this] { WatchLoop(); });
  }
}

void StoreClientImpl::WatchLoop() {
  while (true) {
    grpc::ClientContext* ctx = nullptr;
    {
      MutexLock lock(watch_mu_);
      if (watch_stopping_) {
        return;
      }
      watch_ctx_ = std::make_unique<grpc::ClientContext>();
      ctx = watch_ctx_.get();  // Replaced only by this thread.
    }
    pb::WatchRequest req;
    std::shared_ptr<pb::Master::Stub> stub = Stub();
    auto reader = stub->WatchEvents(ctx, req);
    pb::ObjectEvent e;
    while (reader->Read(&e)) {
      std::shared_ptr<std::function<void(const StoreEvent&)>> h;
      {
        MutexLock lock(watch_mu_);
        h = handler_;
      }
      (*h)(StoreEvent{static_cast<StoreEventKind>(e.kind()), e.key()});
    }
    if (reader->Finish().error_code() == grpc::StatusCode::UNAVAILABLE) {
      Reresolve();  // Events come back from a master that moved.
    }
    MutexLock lock(watch_mu_);
    watch_cv_.WaitFor(lock, std::chrono::milliseconds(200),
                      [this]() SLUICE_REQUIRES(watch_mu_) { return watch_stopping_; });
  }
}

void StoreClientImpl::StopWatching() {
  {
    MutexLock lock(watch_mu_);
    watch_stopping_ = true;
    if (watch_ctx_ != nullptr) {
      watch_ctx_->TryCancel();
    }
  }
  watch_cv_.NotifyAll();
  if (watch_thread_.joinable()) {
    watch_thread_.join();
  }
}

Status StoreClientImpl::Warm() {
  pb::DescribeResponse d;
  SLUICE_RETURN_IF_ERROR(Call(&pb::Master::Stub::Describe, pb::DescribeRequest(), &d, "Describe",
                              config_.rpc_timeout));
  // A first call opens the fast lane, when the master offers one.
  SLUICE_RETURN_IF_ERROR(Exists("sluice/warm").status());
  Status first;
  for (const std::string& endpoint : d.node_endpoints()) {
    if (Status s = WarmNode(endpoint); !s.ok() && first.ok()) {
      first = s.WithContext("store node " + endpoint);
    }
  }
  return first;
}

Status StoreClientImpl::WarmNode(const std::string& endpoint) {
  SLUICE_ASSIGN_OR_RETURN(SegmentId seg, engine_->OpenSegment(endpoint));
  SLUICE_ASSIGN_OR_RETURN(std::vector<RegionInfo> regions, engine_->SegmentRegions(seg));
  MutexLock lock(staging_mu_);
  auto* dst = static_cast<char*>(staging_.data());
  std::vector<TransferRequest> ops;
  for (const RegionInfo& r : regions) {
    if (AllowsRemoteRead(r.access) && r.length > 0 && ops.size() < staging_.size()) {
      ops.push_back(TransferRequest{OpKind::kRead, dst + ops.size(), seg, r.key, 0, 1});
    }
  }
  if (ops.empty()) {
    return Status::Ok();
  }
  SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<TransferBatch> batch, engine_->Submit(ops));
  return batch->Wait(config_.transfer_timeout);
}

std::shared_ptr<fastlane::Client> StoreClientImpl::FastLane() {
  if (!config_.fast_lane) {
    return nullptr;
  }
  MutexLock lock(lane_mu_);
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
  std::string master;
  std::shared_ptr<pb::Master::Stub> stub;
  {
    MutexLock m(master_mu_);
    master = master_;
    stub = stub_;
  }
  if (!stub->Describe(&ctx, req, &resp).ok() || resp.fast_lane_endpoint().empty()) {
    return nullptr;
  }
  Result<HostPort> hp = ParseHostPort(resp.fast_lane_endpoint(), false);
  if (!hp.ok()) {
    SLUICE_LOG(warn, "store client: master offers a bad fast lane '{}'", resp.fast_lane_endpoint());
    return nullptr;
  }
  if (IsWildcardHost(hp->host)) {
    // A master on every address (no advertise): its lane is on the host
    // this client dials it at.
    hp->host = ParseHostPort(master, false)->host;
  }
  lane_ =
      std::make_shared<fastlane::Client>(*hp, config_.rpc_spin, 64, FastLaneKey(config_.security));
  return lane_;
}

void StoreClientImpl::LaneFailed(const std::shared_ptr<fastlane::Client>& lane, const Status& why) {
  lane->Reset();
  MutexLock lock(lane_mu_);
  if (lane_ == lane) {
    SLUICE_LOG(info, "store client: fast lane {} failed ({}); using gRPC",
               lane->endpoint().ToString(), why.ToString());
    lane_ = nullptr;
    reservations_.Clear();  // The master may have restarted: they may be gone.
    next_lane_probe_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  }
}

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

Result<std::unique_ptr<StoreClient>> StoreClient::CreateMetadataOnly(
    const StoreClientConfig& config) {
  auto impl = std::make_unique<internal::StoreClientImpl>(nullptr, config);
  SLUICE_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<StoreClient>(new StoreClient(std::move(impl)));
}

namespace {

// What a metadata-only client answers for a call that moves bytes.
Status NoEngine(std::string_view call) {
  return FailedPreconditionError("store client: " + std::string(call) +
                                 " moves bytes, and this client has no engine "
                                 "(StoreClient::CreateMetadataOnly)");
}

}  // namespace

Result<ObjectView> StoreClient::GetInPlace(std::string_view key, std::chrono::milliseconds wait) {
  if (!impl_->has_engine()) {
    return NoEngine("GetInPlace");
  }
  return impl_->GetInPlace(key, wait);
}

Status StoreClient::PutFrom(std::string_view key, const void* data, std::size_t len,
                            const PutOptions& options) {
  if (!impl_->has_engine()) {
    return NoEngine("PutFrom");
  }
  return impl_->PutFrom(key, data, len, options);
}
Status StoreClient::Put(std::string_view key, std::span<const std::byte> value,
                        const PutOptions& options) {
  if (!impl_->has_engine()) {
    return NoEngine("Put");
  }
  return impl_->Put(key, value, options);
}
Result<ObjectMeta> StoreClient::GetInto(std::string_view key, void* dst, std::size_t capacity) {
  if (!impl_->has_engine()) {
    return NoEngine("GetInto");
  }
  return impl_->GetInto(key, dst, capacity);
}
Result<std::vector<std::byte>> StoreClient::Get(std::string_view key, ObjectMeta* meta) {
  if (!impl_->has_engine()) {
    return NoEngine("Get");
  }
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
Result<StoreUsage> StoreClient::Usage() {
  return impl_->Usage();
}
Status StoreClient::Warm() {
  if (!impl_->has_engine()) {
    return Status::Ok();  // Nothing of the data path to open.
  }
  return impl_->Warm();
}
void StoreClient::Subscribe(std::function<void(const StoreEvent&)> handler) {
  impl_->Subscribe(std::move(handler));
}
Status StoreClient::PutFromRuns(std::string_view key, std::span<const IoRun> runs,
                                const PutOptions& options) {
  if (!impl_->has_engine()) {
    return NoEngine("PutFromRuns");
  }
  return impl_->PutFromRuns(key, runs, options);
}
Result<ObjectMeta> StoreClient::GetIntoRuns(std::string_view key, std::span<const IoRun> runs,
                                            std::chrono::milliseconds wait) {
  if (!impl_->has_engine()) {
    return NoEngine("GetIntoRuns");
  }
  const std::size_t all = runs.size();
  return impl_->GetIntoRunsInParts(key, runs, {&all, 1}, wait, nullptr);
}
Result<ObjectMeta> StoreClient::GetIntoRunsInParts(std::string_view key,
                                                   std::span<const IoRun> runs,
                                                   std::span<const std::size_t> parts,
                                                   std::chrono::milliseconds wait,
                                                   const std::function<void(std::size_t)>& landed) {
  if (!impl_->has_engine()) {
    return NoEngine("GetIntoRunsInParts");
  }
  return impl_->GetIntoRunsInParts(key, runs, parts, wait, landed);
}
std::uint64_t StoreClient::bytes_staged() const {
  return impl_->bytes_staged_.load(std::memory_order_relaxed);
}
std::vector<Status> StoreClient::BatchPutFrom(std::span<const PutItem> items) {
  if (!impl_->has_engine()) {
    return std::vector<Status>(items.size(), NoEngine("BatchPutFrom"));
  }
  return impl_->BatchPutFrom(items);
}
std::vector<Result<ObjectMeta>> StoreClient::BatchGetInto(std::span<const GetItem> items) {
  if (!impl_->has_engine()) {
    return std::vector<Result<ObjectMeta>>(items.size(), NoEngine("BatchGetInto"));
  }
  return impl_->BatchGetInto(items);
}

}  // namespace sluice
