// In-place reads: a same-host node's memory mapped under a read lease
// (ObjectView), ended with a GetEnd round trip that says whether the lease
// held.
#include <atomic>
#include <utility>

#include "store/client/store_client_impl.h"

namespace sluice {
namespace internal {

struct ObjectViewState {
  std::shared_ptr<OwnerLink<StoreClientImpl>> link;
  std::string key;
  std::uint64_t lease_id = 0;
  std::shared_ptr<const void> mapping;  // Keeps the node's memory mapped.
  std::atomic<bool> ended{false};
};

Result<ObjectView> StoreClientImpl::GetInPlace(std::string_view key,
                                               std::chrono::milliseconds wait) {
  SLUICE_ASSIGN_OR_RETURN(OpenGet g, GetStart(key, wait));
  Status last = FailedPreconditionError("object '" + g.key + "' has no replica");
  for (const ReplicaLocation& r : g.replicas) {
    Result<SegmentId> seg = engine_->OpenSegment(r.endpoint);
    Result<PeerMemory> mem =
        seg.ok() ? engine_->MapPeerMemory(*seg, RegionKey{r.region_key}, r.offset, g.meta.size)
                 : Result<PeerMemory>(seg.status());
    if (!mem.ok()) {
      last = mem.status();
      continue;
    }
    auto state = std::make_shared<ObjectViewState>();
    state->link = link_;
    state->key = g.key;
    state->lease_id = g.lease_id;
    state->mapping = std::move(mem->keep);
    ObjectView v;
    v.state_ = std::move(state);
    v.data_ = mem->data;
    v.meta_ = std::move(g.meta);
    return v;
  }
  GetEnd(g, false);
  if (last.code() == StatusCode::kFailedPrecondition) {
    return FailedPreconditionError("object '" + g.key + "' cannot be read in place: " +
                                   std::string(last.message()) + "; read it with GetInto");
  }
  return last.WithContext("GetInPlace '" + g.key + "'");
}

void StoreClientImpl::EndViewAsync(const std::string& key, std::uint64_t lease_id) {
  GetEnd(OpenGet{key, lease_id, {}, {}}, true);
}

namespace {

// The master no longer has the view's lease (NotFound): the bytes may have
// changed under the view.
Status LeaseLost(const Status& s, const std::string& key) {
  if (s.code() != StatusCode::kNotFound) {
    return s;
  }
  return Status(StatusCode::kDataLoss,
                "the read lease on '" + key +
                    "' ended before the view did (held past the master's read lease timeout, "
                    "or the master restarted): the bytes read may have changed meanwhile");
}

}  // namespace

Status StoreClientImpl::EndView(const std::string& key, std::uint64_t lease_id) {
  pb::GetEndRequest req;
  req.set_key(key);
  req.set_lease_id(lease_id);
  req.set_completed(true);
  pb::GetEndResponse resp;
  return LeaseLost(Call(&pb::Master::Stub::GetEnd, fastlane::Method::kGetEnd, req, &resp, "GetEnd"),
                   key);
}

Status StoreClientImpl::RenewView(const std::string& key, std::uint64_t lease_id) {
  pb::RenewReadRequest req;
  req.set_key(key);
  req.set_lease_id(lease_id);
  pb::RenewReadResponse resp;
  return LeaseLost(Call(&pb::Master::Stub::RenewRead, req, &resp, "RenewRead", config_.rpc_timeout),
                   key);
}

}  // namespace internal

ObjectView::ObjectView() = default;
ObjectView::ObjectView(ObjectView&& o) noexcept
    : state_(std::move(o.state_)),
      data_(std::exchange(o.data_, nullptr)),
      meta_(std::exchange(o.meta_, ObjectMeta{})) {}
ObjectView& ObjectView::operator=(ObjectView&& o) noexcept {
  if (this != &o) {
    ObjectView old(std::move(*this));  // Ends the old read as its destructor does.
    state_ = std::move(o.state_);
    data_ = std::exchange(o.data_, nullptr);
    meta_ = std::exchange(o.meta_, ObjectMeta{});
  }
  return *this;
}
ObjectView::~ObjectView() {
  if (state_ == nullptr || state_->ended.exchange(true)) {
    return;
  }
  // Without waiting for the answer: a destructor must not block (Python
  // drops views with the GIL held). The client's destructor waits for it.
  internal::ObjectViewState& v = *state_;
  v.link->Call([&v](internal::StoreClientImpl& c) { c.EndViewAsync(v.key, v.lease_id); });
}

namespace {

// `call` (an RPC about the view's lease) run on the view's client;
// kFailedPrecondition when the client is gone.
template <typename Call>
Status OnClient(internal::ObjectViewState& v, const Call& call) {
  Status s;
  if (!v.link->Call([&](internal::StoreClientImpl& c) { s = call(c); })) {
    return FailedPreconditionError("the store client is gone; the read lease on '" + v.key +
                                   "' ends by the master's timeout");
  }
  return s;
}

}  // namespace

Status ObjectView::Renew() {
  if (state_ == nullptr || state_->ended.load()) {
    return FailedPreconditionError("the view has ended");
  }
  internal::ObjectViewState& v = *state_;
  return OnClient(v, [&v](internal::StoreClientImpl& c) { return c.RenewView(v.key, v.lease_id); });
}

Status ObjectView::End() {
  if (state_ == nullptr || state_->ended.exchange(true)) {
    return Status::Ok();
  }
  internal::ObjectViewState& v = *state_;
  return OnClient(v, [&v](internal::StoreClientImpl& c) { return c.EndView(v.key, v.lease_id); });
}

}  // namespace sluice
