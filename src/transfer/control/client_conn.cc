#include "transfer/control/client_conn.h"

#include <sys/epoll.h>

namespace sluice::internal {

Status PeerError(const std::string& peer, const WireHeader& h, std::string_view body) {
  auto code = static_cast<StatusCode>(h.status);
  if (h.status > static_cast<std::uint16_t>(kMaxStatusCode)) {
    code = StatusCode::kInternal;
  }
  return Status(code, "target " + peer + ": " + std::string(body), FailureScope::kRequest);
}

ClientConn::ClientConn(UniqueFd fd, EventLoop* loop, std::string peer,
                       std::chrono::milliseconds timeout, Callbacks callbacks,
                       std::unique_ptr<FrameSeal> seal)
    : ControlConn(std::move(fd), loop, std::move(peer), timeout), callbacks_(std::move(callbacks)) {
  if (seal != nullptr) {
    StartSealing(std::move(seal));
  }
}

void ClientConn::Begin() {
  Watch(EPOLLIN);
}

Status ClientConn::EnqueueNotify(std::string message) {
  MutexLock lock(mu_);
  if (closed_flag_) {
    return close_status_;
  }
  notifies_.push_back(std::move(message));
  if (!drain_scheduled_) {
    drain_scheduled_ = true;
    Post([this] { DrainNotifies(); });
  }
  return Status::Ok();
}

void ClientConn::DrainNotifies() {
  std::vector<std::string> out;
  {
    MutexLock lock(mu_);
    drain_scheduled_ = false;
    out.swap(notifies_);
  }
  if (FrameConn::closed()) {
    return;  // Dropped: the writes they followed failed too.
  }
  for (std::string& n : out) {
    OutFrame f;
    f.hdr = MakeHeader(FrameType::kNotify, 0, n.size());
    f.body = std::move(n);
    FrameConn::Queue(std::move(f));
  }
  FrameConn::Flush();
}

void ClientConn::CloseAsync(const Status& why) {
  Post([this, why] { Close(why); });
}

Result<bool> ClientConn::FillPayload(OutFrame& frame) {
  return half_ != nullptr ? half_->FillPayload(frame) : Result<bool>(true);
}

void ClientConn::OnFrameReleased(const OutFrame& frame) {
  if (half_ != nullptr) {
    half_->OnFrameReleased(frame);
  }
}

Status ClientConn::OnHeader(const WireHeader& h, Sink* sink, std::uint64_t* follow) {
  if (h.version != kWireVersion) {
    return InvalidArgumentError("peer " + peer() + " sent protocol version " +
                                std::to_string(h.version));
  }
  const auto type = static_cast<FrameType>(h.type);
  if (type == FrameType::kTableUpdate || type == FrameType::kError) {
    if (h.length > kMaxControlBody) {
      return InvalidArgumentError("oversized control frame from " + peer());
    }
    *follow = h.length;
    return Status::Ok();
  }
  if (half_ == nullptr || !half_->Claims(type)) {
    return InvalidArgumentError("unexpected frame type " + std::to_string(h.type) + " from " +
                                peer());
  }
  return half_->OnHeader(h, sink, follow);
}

Status ClientConn::OnFrame(const WireHeader& h, std::string_view body) {
  const auto type = static_cast<FrameType>(h.type);
  if (type == FrameType::kTableUpdate) {
    Result<RegionTable> t = DecodeTable(body);
    if (!t.ok()) {
      return t.status().WithContext("table update from " + peer());
    }
    if (callbacks_.on_table) {
      callbacks_.on_table(std::move(*t));
    }
    return Status::Ok();
  }
  if (type == FrameType::kError) {
    return PeerError(peer(), h, body);
  }
  return half_->OnFrame(h, body);  // OnHeader let only its frames through.
}

void ClientConn::OnClosed(const Status& why) {
  Status failure = why;
  if (why.scope() != FailureScope::kEndpoint && why.code() != StatusCode::kCancelled) {
    failure =
        Status(why.code() == StatusCode::kInvalidArgument ? StatusCode::kUnavailable : why.code(),
               "connection to " + peer() + " closed: " + std::string(why.message()),
               FailureScope::kEndpoint);
  }
  {
    MutexLock lock(mu_);
    closed_flag_ = true;
    close_status_ = failure;
    notifies_.clear();
  }
  // Mark the peer dead before failing ops, so a caller reacting to a failed
  // batch already sees the peer as down.
  if (callbacks_.on_closed) {
    callbacks_.on_closed(failure);
  }
  if (half_ != nullptr) {
    half_->OnClosed(failure);
  }
}

}  // namespace sluice::internal
