#include "transfer/tcp/op_server.h"

namespace sluice::internal {

Status TcpOpServer::EnsureStaging(std::uint64_t len) {
  if (len > ctx_.slot_size) {
    return InvalidArgumentError(
        "an op on device memory carries at most " + std::to_string(ctx_.slot_size) +
        " bytes per frame here (the target's slice_size), not " + std::to_string(len));
  }
  if (staging_ == nullptr) {
    SLUICE_ASSIGN_OR_RETURN(staging_,
                            DeviceStaging::Create(ctx_.backend, ctx_.slot_size, 2, ctx_.timeout));
  }
  return Status::Ok();
}

Result<bool> TcpOpServer::FillPayload(FrameConn::OutFrame& frame) {
  Result<char*> slot = staging_->StageOut(frame.payload, frame.payload_len);
  if (!slot.ok()) {  // Answered as a failed read instead.
    const std::string why = "reading device memory: " + std::string(slot.status().message());
    frame.hdr.status = static_cast<std::uint16_t>(slot.status().code());
    frame.hdr.length = why.size();
    frame.body = why;
    frame.payload = nullptr;
    frame.payload_len = 0;
    return true;
  }
  if (*slot == nullptr) {
    return false;
  }
  frame.payload = *slot;
  frame.staged = true;
  return true;
}

Status TcpOpServer::OnHeader(const WireHeader& h, FrameConn::Sink* sink, std::uint64_t* follow) {
  if (h.length == 0 || h.length > ctx_.max_frame_payload) {
    return InvalidArgumentError(
        std::string(static_cast<FrameType>(h.type) == FrameType::kWriteReq ? "write" : "read") +
        " of " + std::to_string(h.length) + " bytes from " + conn_->peer() +
        " exceeds the frame limit");
  }
  if (static_cast<FrameType>(h.type) == FrameType::kReadReq) {
    *follow = 0;
    return Status::Ok();
  }
  Result<char*> dst = ctx_.regions->PinRemote(h.key, h.offset, h.length, true,
                                              ctx_.backend != nullptr, &write_region_);
  *follow = h.length;
  if (dst.ok() && write_region_->kind == MemoryKind::kDevice) {
    Status staged = EnsureStaging(h.length);
    if (!staged.ok()) {
      RegionTableLocal::Unpin(write_region_);
      dst = staged;
    }
  }
  if (dst.ok()) {
    sink->kind = FrameConn::Sink::Kind::kMemory;
    sink->dst = *dst;
    if (write_region_->kind == MemoryKind::kDevice) {
      write_device_dst_ = *dst;
      sink->dst = staging_->recv_slot();
    }
  } else {
    write_region_ = nullptr;
    write_error_ = dst.status();
    sink->kind = FrameConn::Sink::Kind::kDrain;
  }
  return Status::Ok();
}

void TcpOpServer::SendStatus(FrameType type, std::uint64_t id, const Status& s) {
  FrameConn::OutFrame f;
  f.hdr = MakeHeader(type, id, s.message().size());
  f.hdr.status = static_cast<std::uint16_t>(s.code());
  f.body = std::string(s.message());
  f.owner = this;
  conn_->Send(std::move(f));
}

Status TcpOpServer::OnFrame(const WireHeader& h, std::string_view /*body*/) {
  if (static_cast<FrameType>(h.type) == FrameType::kWriteReq) {
    if (write_region_ == nullptr) {
      SendStatus(FrameType::kWriteAck, h.request_id, write_error_);
      return Status::Ok();
    }
    Status landed;
    if (write_device_dst_ != nullptr) {
      landed = staging_->Copy(write_device_dst_, staging_->recv_slot(), h.length);
      write_device_dst_ = nullptr;
    }
    RegionTableLocal::Unpin(write_region_);
    write_region_ = nullptr;
    if (landed.ok()) {
      ctx_.served_written->fetch_add(h.length, std::memory_order_relaxed);
    }
    SendStatus(FrameType::kWriteAck, h.request_id,
               landed.ok() ? landed : landed.WithContext("writing device memory"));
    return Status::Ok();
  }
  LocalRegion* region = nullptr;
  Result<char*> src =
      ctx_.regions->PinRemote(h.key, h.offset, h.length, false, ctx_.backend != nullptr, &region);
  const bool device = src.ok() && region->kind == MemoryKind::kDevice;
  if (device) {
    Status staged = EnsureStaging(h.length);
    if (!staged.ok()) {
      RegionTableLocal::Unpin(region);
      src = staged;
    }
  }
  if (!src.ok()) {
    SendStatus(FrameType::kReadResp, h.request_id, src.status());
    return Status::Ok();
  }
  FrameConn::OutFrame f;
  f.hdr = MakeHeader(FrameType::kReadResp, h.request_id, h.length);
  f.payload = *src;
  f.payload_len = h.length;
  f.fill = device;    // Device memory: staged as the frame goes out.
  f.cookie = region;  // Unpinned once sent (or dropped).
  f.owner = this;
  // Counted before the peer can see its op done.
  ctx_.served_read->fetch_add(h.length, std::memory_order_relaxed);
  conn_->Send(std::move(f));
  return Status::Ok();
}

void TcpOpServer::OnFrameReleased(const FrameConn::OutFrame& frame) {
  if (frame.cookie != nullptr) {
    RegionTableLocal::Unpin(static_cast<LocalRegion*>(frame.cookie));
  }
  if (frame.staged) {
    staging_->ReturnSendSlot(const_cast<char*>(frame.payload));
  }
}

void TcpOpServer::OnClosed(const Status& /*why*/) {
  if (write_region_ != nullptr) {  // Closed mid-payload.
    RegionTableLocal::Unpin(write_region_);
    write_region_ = nullptr;
    write_device_dst_ = nullptr;
  }
}

}  // namespace sluice::internal
