#include "transfer/tcp/client_session.h"

#include <sys/epoll.h>

#include "common/mutex.h"

namespace sluice::internal {

ClientSession::ClientSession(UniqueFd fd, EventLoop* loop, std::string peer,
                             std::chrono::milliseconds timeout, Callbacks callbacks,
                             device::DeviceBackend* device, std::uint64_t slice_size,
                             std::unique_ptr<FrameSeal> seal)
    : FrameConn(std::move(fd), loop, std::move(peer), timeout),
      callbacks_(std::move(callbacks)),
      device_(device),
      slice_size_(slice_size),
      timeout_(timeout) {
  if (seal != nullptr) {
    StartSealing(std::move(seal));
  }
}

Status ClientSession::EnsureStaging() {
  if (staging_ != nullptr) {
    return Status::Ok();
  }
  if (device_ == nullptr || slice_size_ == 0) {
    return InternalError("a device slice on a connection without device staging");
  }
  SLUICE_ASSIGN_OR_RETURN(staging_, DeviceStaging::Create(device_, slice_size_, 2, timeout_));
  return Status::Ok();
}

Result<bool> ClientSession::FillPayload(OutFrame& frame) {
  Result<char*> slot = staging_->StageOut(frame.payload, frame.payload_len);
  if (!slot.ok()) {
    return slot.status().WithContext("staging device memory for " + peer());
  }
  if (*slot == nullptr) {
    return false;
  }
  frame.payload = *slot;
  frame.staged = true;
  return true;
}

void ClientSession::OnFrameReleased(const OutFrame& frame) {
  if (frame.staged) {
    staging_->ReturnSendSlot(const_cast<char*>(frame.payload));
  }
}

void ClientSession::Begin() {
  Watch(EPOLLIN);
}

void ClientSession::ScheduleDrainLocked() {
  if (drain_scheduled_) {
    return;
  }
  drain_scheduled_ = true;
  loop()->Post([w = std::weak_ptr<FrameConn>(shared_from_this())] {
    if (auto s = w.lock()) {
      static_cast<ClientSession*>(s.get())->Drain();
    }
  });
}

Status ClientSession::Enqueue(const Slice& slice) {
  MutexLock lock(mu_);
  if (closed_flag_) {
    return close_status_;
  }
  incoming_.push_back(Item{slice, {}});
  ScheduleDrainLocked();
  return Status::Ok();
}

Status ClientSession::EnqueueNotify(std::string message) {
  MutexLock lock(mu_);
  if (closed_flag_) {
    return close_status_;
  }
  incoming_.push_back(Item{Slice{}, std::move(message)});
  ScheduleDrainLocked();
  return Status::Ok();
}

void ClientSession::CloseAsync(const Status& why) {
  loop()->Post([w = std::weak_ptr<FrameConn>(shared_from_this()), why] {
    if (auto s = w.lock()) {
      static_cast<ClientSession*>(s.get())->Close(why);
    }
  });
}

void ClientSession::Drain() {
  {
    MutexLock lock(mu_);
    drain_scheduled_ = false;
    draining_.swap(incoming_);
  }
  if (closed()) {  // OnClosed already failed everything queued before it.
    Status why;
    {
      MutexLock lock(mu_);
      why = close_status_;  // What OnClosed recorded.
    }
    for (Item& item : draining_) {
      if (item.notify.empty()) {
        item.slice.batch->UnitDone(item.slice.op_index, why);
      }
    }
    draining_.clear();
    return;
  }
  for (Item& item : draining_) {
    if (!item.notify.empty()) {
      OutFrame f;
      f.hdr = MakeHeader(FrameType::kNotify, 0, item.notify.size());
      f.body = std::move(item.notify);
      Queue(std::move(f));
      continue;
    }
    const Slice& s = item.slice;
    if (s.local_device) {
      Status ready = EnsureStaging();
      if (ready.ok() && s.length > staging_->slot_size()) {
        ready = InternalError("a device slice larger than the staging slots");
      }
      if (!ready.ok()) {
        s.batch->UnitDone(s.op_index, ready);
        continue;
      }
    }
    const std::uint64_t id = next_id_++;
    OutFrame f;
    if (s.kind == OpKind::kWrite) {
      f.hdr = MakeHeader(FrameType::kWriteReq, id, s.length);
      f.payload = s.local;
      f.payload_len = s.length;
      f.fill = s.local_device;  // Staged as the frame goes out.
    } else {
      f.hdr = MakeHeader(FrameType::kReadReq, id, s.length);
    }
    f.hdr.key = s.key;
    f.hdr.offset = s.offset;
    pending_.emplace_back(id, s);
    Queue(std::move(f));
  }
  draining_.clear();
  Flush();
}

Status ClientSession::OnHeader(const WireHeader& h, Sink* sink, std::uint64_t* follow) {
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
  if (type != FrameType::kWriteAck && type != FrameType::kReadResp) {
    return InvalidArgumentError("unexpected frame type " + std::to_string(h.type) + " from " +
                                peer());
  }
  if (pending_.empty() || pending_.front().first != h.request_id) {
    return InvalidArgumentError("response from " + peer() + " matches no pending request");
  }
  const Slice& s = pending_.front().second;
  const bool want_read = s.kind == OpKind::kRead;
  if (want_read != (type == FrameType::kReadResp)) {
    return InvalidArgumentError("response type from " + peer() + " does not match the request");
  }
  if (h.status != 0) {  // Error message follows.
    if (h.length > kMaxControlBody) {
      return InvalidArgumentError("oversized error message from " + peer());
    }
    *follow = h.length;
    return Status::Ok();
  }
  if (type == FrameType::kReadResp) {
    if (h.length != s.length) {
      return InvalidArgumentError("read response from " + peer() + " has the wrong length");
    }
    sink->kind = Sink::Kind::kMemory;
    sink->dst = s.local_device ? staging_->recv_slot() : s.local;
    *follow = h.length;
    return Status::Ok();
  }
  *follow = 0;
  return h.length == 0 ? Status::Ok()
                       : InvalidArgumentError("write ack from " + peer() + " carries bytes");
}

Status ClientSession::PeerError(const WireHeader& h, std::string_view body) const {
  auto code = static_cast<StatusCode>(h.status);
  if (h.status > static_cast<std::uint16_t>(kMaxStatusCode)) {
    code = StatusCode::kInternal;
  }
  return Status(code, "target " + peer() + ": " + std::string(body), FailureScope::kRequest);
}

Status ClientSession::OnFrame(const WireHeader& h, std::string_view body) {
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
    return PeerError(h, body);
  }
  Slice s = pending_.front().second;
  pending_.pop_front();
  Status done = h.status == 0 ? Status::Ok() : PeerError(h, body);
  if (done.ok() && s.local_device && s.kind == OpKind::kRead) {
    done = staging_->Copy(s.local, staging_->recv_slot(), s.length);
    if (!done.ok()) {
      done = done.WithContext("copying a read from " + peer() + " into device memory");
    }
  }
  s.batch->UnitDone(s.op_index, done);
  return Status::Ok();
}

void ClientSession::OnClosed(const Status& why) {
  Status failure = why;
  if (why.scope() != FailureScope::kEndpoint && why.code() != StatusCode::kCancelled) {
    failure =
        Status(why.code() == StatusCode::kInvalidArgument ? StatusCode::kUnavailable : why.code(),
               "connection to " + peer() + " closed: " + std::string(why.message()),
               FailureScope::kEndpoint);
  }
  std::vector<Item> queued;
  {
    MutexLock lock(mu_);
    closed_flag_ = true;
    close_status_ = failure;
    queued.swap(incoming_);
  }
  // Mark the peer dead before failing ops, so a caller reacting to a failed
  // batch already sees the peer as down.
  if (callbacks_.on_closed) {
    callbacks_.on_closed(failure);
  }
  for (auto& [id, s] : pending_) {
    s.batch->UnitDone(s.op_index, failure);
  }
  pending_.clear();
  for (Item& item : queued) {
    if (item.notify.empty()) {
      item.slice.batch->UnitDone(item.slice.op_index, failure);
    }
  }
}

}  // namespace sluice::internal
