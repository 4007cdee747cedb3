#include "transfer/tcp/op_client.h"

namespace sluice::internal {

TcpOpClient::TcpOpClient(ConnPort* conn, device::DeviceBackend* device, std::uint64_t slice_size,
                         std::chrono::milliseconds timeout)
    : conn_(conn), device_(device), slice_size_(slice_size), timeout_(timeout) {}

Status TcpOpClient::EnsureStaging() {
  if (staging_ != nullptr) {
    return Status::Ok();
  }
  if (device_ == nullptr || slice_size_ == 0) {
    return InternalError("a device slice on a connection without device staging");
  }
  SLUICE_ASSIGN_OR_RETURN(staging_, DeviceStaging::Create(device_, slice_size_, 2, timeout_));
  return Status::Ok();
}

Result<bool> TcpOpClient::FillPayload(FrameConn::OutFrame& frame) {
  Result<char*> slot = staging_->StageOut(frame.payload, frame.payload_len);
  if (!slot.ok()) {
    return slot.status().WithContext("staging device memory for " + conn_->peer());
  }
  if (*slot == nullptr) {
    return false;
  }
  frame.payload = *slot;
  frame.staged = true;
  return true;
}

void TcpOpClient::OnFrameReleased(const FrameConn::OutFrame& frame) {
  if (frame.staged) {
    staging_->ReturnSendSlot(const_cast<char*>(frame.payload));
  }
}

Status TcpOpClient::Enqueue(const Slice& slice) {
  MutexLock lock(mu_);
  if (closed_flag_) {
    return close_status_;
  }
  incoming_.push_back(slice);
  if (!drain_scheduled_) {
    drain_scheduled_ = true;
    conn_->Post([this] { Drain(); });
  }
  return Status::Ok();
}

void TcpOpClient::Drain() {
  {
    MutexLock lock(mu_);
    drain_scheduled_ = false;
    draining_.swap(incoming_);
  }
  if (conn_->closed()) {  // OnClosed already failed everything queued before it.
    Status why;
    {
      MutexLock lock(mu_);
      why = close_status_;  // What OnClosed recorded.
    }
    for (const Slice& s : draining_) {
      s.batch->UnitDone(s.op_index, why);
    }
    draining_.clear();
    return;
  }
  for (const Slice& s : draining_) {
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
    FrameConn::OutFrame f;
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
    conn_->Queue(std::move(f));
  }
  draining_.clear();
  conn_->Flush();
}

Status TcpOpClient::OnHeader(const WireHeader& h, FrameConn::Sink* sink, std::uint64_t* follow) {
  const auto type = static_cast<FrameType>(h.type);
  if (pending_.empty() || pending_.front().first != h.request_id) {
    return InvalidArgumentError("response from " + conn_->peer() + " matches no pending request");
  }
  const Slice& s = pending_.front().second;
  const bool want_read = s.kind == OpKind::kRead;
  if (want_read != (type == FrameType::kReadResp)) {
    return InvalidArgumentError("response type from " + conn_->peer() +
                                " does not match the request");
  }
  if (h.status != 0) {  // Error message follows.
    if (h.length > kMaxControlBody) {
      return InvalidArgumentError("oversized error message from " + conn_->peer());
    }
    *follow = h.length;
    return Status::Ok();
  }
  if (type == FrameType::kReadResp) {
    if (h.length != s.length) {
      return InvalidArgumentError("read response from " + conn_->peer() + " has the wrong length");
    }
    sink->kind = FrameConn::Sink::Kind::kMemory;
    sink->dst = s.local_device ? staging_->recv_slot() : s.local;
    *follow = h.length;
    return Status::Ok();
  }
  *follow = 0;
  return h.length == 0 ? Status::Ok()
                       : InvalidArgumentError("write ack from " + conn_->peer() + " carries bytes");
}

Status TcpOpClient::OnFrame(const WireHeader& h, std::string_view body) {
  Slice s = pending_.front().second;
  pending_.pop_front();
  Status done = h.status == 0 ? Status::Ok() : PeerError(conn_->peer(), h, body);
  if (done.ok() && s.local_device && s.kind == OpKind::kRead) {
    done = staging_->Copy(s.local, staging_->recv_slot(), s.length);
    if (!done.ok()) {
      done = done.WithContext("copying a read from " + conn_->peer() + " into device memory");
    }
  }
  s.batch->UnitDone(s.op_index, done);
  return Status::Ok();
}

void TcpOpClient::OnClosed(const Status& failure) {
  std::vector<Slice> queued;
  {
    MutexLock lock(mu_);
    closed_flag_ = true;
    close_status_ = failure;
    queued.swap(incoming_);
  }
  for (auto& [id, s] : pending_) {
    s.batch->UnitDone(s.op_index, failure);
  }
  pending_.clear();
  for (const Slice& s : queued) {
    s.batch->UnitDone(s.op_index, failure);
  }
}

}  // namespace sluice::internal
