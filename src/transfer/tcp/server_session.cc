#include "transfer/tcp/server_session.h"

#include <sys/epoll.h>

#include <algorithm>

#include "common/log.h"

namespace sluice::internal {

ServerSession::ServerSession(UniqueFd fd, EventLoop* loop, std::string peer,
                             std::chrono::milliseconds timeout, ServerHost* host)
    : FrameConn(std::move(fd), loop, std::move(peer), timeout), host_(host), timeout_(timeout) {}

Status ServerSession::EnsureStaging(std::uint64_t len) {
  const std::uint64_t slot = host_->staging_slot_size();
  if (len > slot) {
    return InvalidArgumentError("an op on device memory carries at most " + std::to_string(slot) +
                                " bytes per frame here (the target's slice_size), not " +
                                std::to_string(len));
  }
  if (staging_ == nullptr) {
    SLUICE_ASSIGN_OR_RETURN(staging_,
                            DeviceStaging::Create(host_->device_backend(), slot, 2, timeout_));
  }
  return Status::Ok();
}

Result<bool> ServerSession::FillPayload(OutFrame& frame) {
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

void ServerSession::Start(UniqueFd fd, EventLoop* loop, std::string peer,
                          std::chrono::milliseconds timeout, ServerHost* host) {
  auto s = std::make_shared<ServerSession>(std::move(fd), loop, std::move(peer), timeout, host);
  s->Watch(EPOLLIN);
  loop->Post([s] { s->SendHello(); });
}

void ServerSession::SendHello() {
  if (closed()) {
    return;
  }
  RandomBytes(nonce_.data(), nonce_.size());
  OutFrame f;
  f.hdr = MakeHeader(FrameType::kServerHello, 0, nonce_.size());
  f.body.assign(reinterpret_cast<const char*>(nonce_.data()), nonce_.size());
  Send(std::move(f));
}

void ServerSession::PushTable(std::shared_ptr<const std::string> encoded) {
  loop()->Post([w = std::weak_ptr<FrameConn>(shared_from_this()), encoded] {
    auto s = w.lock();
    if (s == nullptr || static_cast<ServerSession*>(s.get())->closed()) {
      return;
    }
    OutFrame f;
    f.hdr = MakeHeader(FrameType::kTableUpdate, 0, encoded->size());
    f.body = *encoded;
    static_cast<ServerSession*>(s.get())->Send(std::move(f));
  });
}

void ServerSession::EndHandshake() {
  if (handshaking_) {
    handshaking_ = false;
    host_->HandshakeEnded();
  }
}

void ServerSession::OnTick(Clock::time_point now) {
  if (handshaking_ && !closed() && now - accepted_ > host_->handshake_timeout()) {
    const std::string why =
        "no handshake within " + std::to_string(host_->handshake_timeout().count()) + " ms";
    host_->refusals().Refused(peer(), why);
    EndHandshake();
    Close(DeadlineExceededError("connection from " + peer() + ": " + why, FailureScope::kEndpoint));
    return;
  }
  FrameConn::OnTick(now);
}

void ServerSession::Reject(StatusCode code, const std::string& reason) {
  host_->refusals().Refused(peer(), reason);  // At most one line a second.
  EndHandshake();
  rejected_ = true;
  OutFrame f;
  f.hdr = MakeHeader(FrameType::kError, 0, reason.size());
  f.hdr.status = static_cast<std::uint16_t>(code);
  f.body = reason;
  Queue(std::move(f));
  CloseAfterFlush(Status(code, reason));
}

Status ServerSession::OnHeader(const WireHeader& h, Sink* sink, std::uint64_t* follow) {
  const auto type = static_cast<FrameType>(h.type);
  if (rejected_) {  // Closing once the rejection is written; ignore the rest.
    sink->kind = Sink::Kind::kDrain;
    *follow = std::min<std::uint64_t>(h.length, kMaxControlBody);
    return Status::Ok();
  }
  if (!ready_) {
    if (h.version != kWireVersion) {
      Reject(StatusCode::kFailedPrecondition,
             "unsupported protocol version " + std::to_string(h.version) + " (this engine speaks " +
                 std::to_string(kWireVersion) + ")");
      return Status::Ok();
    }
    if (type != FrameType::kClientHello || h.length > 4096) {
      return InvalidArgumentError("malformed handshake from " + peer());
    }
    *follow = h.length;
    return Status::Ok();
  }
  if (h.version != kWireVersion) {
    return InvalidArgumentError("frame with protocol version " + std::to_string(h.version) +
                                " from " + peer());
  }
  switch (type) {
    case FrameType::kWriteReq: {
      if (h.length == 0 || h.length > host_->max_frame_payload()) {
        return InvalidArgumentError("write of " + std::to_string(h.length) + " bytes from " +
                                    peer() + " exceeds the frame limit");
      }
      Result<char*> dst = host_->regions().PinRemote(
          h.key, h.offset, h.length, true, host_->device_backend() != nullptr, &write_region_);
      *follow = h.length;
      if (dst.ok() && write_region_->kind == MemoryKind::kDevice) {
        Status staged = EnsureStaging(h.length);
        if (!staged.ok()) {
          RegionTableLocal::Unpin(write_region_);
          dst = staged;
        }
      }
      if (dst.ok()) {
        sink->kind = Sink::Kind::kMemory;
        sink->dst = *dst;
        if (write_region_->kind == MemoryKind::kDevice) {
          write_device_dst_ = *dst;
          sink->dst = staging_->recv_slot();
        }
      } else {
        write_region_ = nullptr;
        write_error_ = dst.status();
        sink->kind = Sink::Kind::kDrain;
      }
      return Status::Ok();
    }
    case FrameType::kReadReq:
      if (h.length == 0 || h.length > host_->max_frame_payload()) {
        return InvalidArgumentError("read of " + std::to_string(h.length) + " bytes from " +
                                    peer() + " exceeds the frame limit");
      }
      *follow = 0;
      return Status::Ok();
    case FrameType::kNotify:
      if (h.length == 0 || h.length > host_->max_notify_bytes()) {
        return InvalidArgumentError("notify of " + std::to_string(h.length) + " bytes from " +
                                    peer() + " exceeds the notify limit");
      }
      *follow = h.length;
      return Status::Ok();
    default:
      return InvalidArgumentError("unexpected frame type " + std::to_string(h.type) + " from " +
                                  peer());
  }
}

Status ServerSession::OnClientHello(const WireHeader& h, std::string_view body) {
  Result<ClientHello> hello = DecodeClientHello(body);
  if (!hello.ok()) {
    return hello.status().WithContext("handshake from " + peer());
  }
  if (!MacEquals(hello->mac, ClientHelloMac(host_->secret(), nonce_, *hello))) {
    Reject(StatusCode::kPermissionDenied, "authentication failed: wrong or missing secret");
    return Status::Ok();
  }
  const bool encrypt = (h.key & kHelloWantsEncryption) != 0;
  if (host_->requires_encryption() && !encrypt) {
    Reject(StatusCode::kFailedPrecondition,
           "this target takes only encrypted payload: give the initiator encrypt_data "
           "(--encrypt-data)");
    return Status::Ok();
  }
  std::unique_ptr<FrameSeal> seal;
  if (!host_->secret().empty()) {
    Result<std::unique_ptr<FrameSeal>> made =
        FrameSeal::Create(host_->secret(), nonce_, hello->client_nonce, encrypt, false);
    if (!made.ok()) {
      return made.status();
    }
    seal = std::move(*made);
  }
  sender_ = hello->endpoint;
  ready_ = true;
  EndHandshake();
  // This side's proof, over its host info and table (the client checks it
  // before trusting either).
  HelloOk answer = host_->MakeHelloOk();
  answer.mac = HelloOkMac(host_->secret(), nonce_, hello->client_nonce, answer);
  const std::string ok = EncodeHelloOk(answer);
  OutFrame f;
  f.hdr = MakeHeader(FrameType::kHelloOk, 0, ok.size());
  f.body = ok;
  Send(std::move(f));
  if (seal != nullptr) {
    StartSealing(std::move(seal));  // Every frame after the hello-ok, both ways.
  }
  if ((h.key & kHelloWantsTable) != 0) {
    subscribed_ = true;
    host_->Subscribe(std::static_pointer_cast<ServerSession>(shared_from_this()));
  }
  return Status::Ok();
}

void ServerSession::SendStatus(FrameType type, std::uint64_t id, const Status& s) {
  OutFrame f;
  f.hdr = MakeHeader(type, id, s.message().size());
  f.hdr.status = static_cast<std::uint16_t>(s.code());
  f.body = std::string(s.message());
  Send(std::move(f));
}

Status ServerSession::OnFrame(const WireHeader& h, std::string_view body) {
  if (rejected_) {
    return Status::Ok();
  }
  switch (static_cast<FrameType>(h.type)) {
    case FrameType::kClientHello:
      return OnClientHello(h, body);
    case FrameType::kWriteReq:
      if (write_region_ != nullptr) {
        Status landed;
        if (write_device_dst_ != nullptr) {
          landed = staging_->Copy(write_device_dst_, staging_->recv_slot(), h.length);
          write_device_dst_ = nullptr;
        }
        RegionTableLocal::Unpin(write_region_);
        write_region_ = nullptr;
        if (landed.ok()) {
          host_->CountServed(0, h.length);
        }
        SendStatus(FrameType::kWriteAck, h.request_id,
                   landed.ok() ? landed : landed.WithContext("writing device memory"));
      } else {
        SendStatus(FrameType::kWriteAck, h.request_id, write_error_);
      }
      return Status::Ok();
    case FrameType::kReadReq: {
      LocalRegion* region = nullptr;
      Result<char*> src = host_->regions().PinRemote(h.key, h.offset, h.length, false,
                                                     host_->device_backend() != nullptr, &region);
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
      OutFrame f;
      f.hdr = MakeHeader(FrameType::kReadResp, h.request_id, h.length);
      f.payload = *src;
      f.payload_len = h.length;
      f.fill = device;                  // Device memory: staged as the frame goes out.
      f.cookie = region;                // Unpinned once sent (or dropped).
      host_->CountServed(h.length, 0);  // Before the peer can see its op done.
      Send(std::move(f));
      return Status::Ok();
    }
    case FrameType::kNotify:
      host_->DeliverNotify(sender_, std::as_bytes(std::span(body.data(), body.size())));
      return Status::Ok();
    default:
      return InternalError("frame type passed header checks but has no handler");
  }
}

void ServerSession::OnFrameReleased(const OutFrame& frame) {
  if (frame.cookie != nullptr) {
    RegionTableLocal::Unpin(static_cast<LocalRegion*>(frame.cookie));
  }
  if (frame.staged) {
    staging_->ReturnSendSlot(const_cast<char*>(frame.payload));
  }
}

void ServerSession::OnClosed(const Status& why) {
  EndHandshake();
  if (write_region_ != nullptr) {  // Closed mid-payload.
    RegionTableLocal::Unpin(write_region_);
    write_region_ = nullptr;
    write_device_dst_ = nullptr;
  }
  if (subscribed_) {
    host_->Unsubscribe(this);
  }
  const bool normal =
      why.code() == StatusCode::kCancelled || (why.code() == StatusCode::kUnavailable && ready_);
  if (normal) {
    SLUICE_LOG(debug, "connection from {} closed: {}", peer(), why.ToString());
  } else {
    SLUICE_LOG(warn, "closed connection from {}: {}", peer(), why.ToString());
  }
}

}  // namespace sluice::internal
