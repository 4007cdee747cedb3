#include "transfer/control/server_conn.h"

#include <sys/epoll.h>

#include <algorithm>

#include "common/log.h"
#include "transfer/control/handshake.h"

namespace sluice::internal {

ServerConn::ServerConn(UniqueFd fd, EventLoop* loop, std::string peer,
                       std::chrono::milliseconds timeout, ServerHost* host)
    : ControlConn(std::move(fd), loop, std::move(peer), timeout), host_(host) {}

void ServerConn::Start(UniqueFd fd, EventLoop* loop, std::string peer,
                       std::chrono::milliseconds timeout, ServerHost* host) {
  auto c = std::make_shared<ServerConn>(std::move(fd), loop, std::move(peer), timeout, host);
  c->Watch(EPOLLIN);
  loop->Post([c] { c->SendHello(); });
}

void ServerConn::SendHello() {
  if (FrameConn::closed()) {
    return;
  }
  RandomBytes(nonce_.data(), nonce_.size());
  OutFrame f;
  f.hdr = MakeHeader(FrameType::kServerHello, 0, nonce_.size());
  f.body.assign(reinterpret_cast<const char*>(nonce_.data()), nonce_.size());
  FrameConn::Send(std::move(f));
}

void ServerConn::PushTable(std::shared_ptr<const std::string> encoded) {
  Post([this, encoded] {
    if (FrameConn::closed()) {
      return;
    }
    OutFrame f;
    f.hdr = MakeHeader(FrameType::kTableUpdate, 0, encoded->size());
    f.body = *encoded;
    FrameConn::Send(std::move(f));
  });
}

void ServerConn::EndHandshake() {
  if (handshaking_) {
    handshaking_ = false;
    host_->HandshakeEnded();
  }
}

void ServerConn::OnTick(Clock::time_point now) {
  if (handshaking_ && !FrameConn::closed() && now - accepted_ > host_->handshake_timeout()) {
    const std::string why =
        "no handshake within " + std::to_string(host_->handshake_timeout().count()) + " ms";
    host_->refusals().Refused(peer(), why);
    EndHandshake();
    Close(DeadlineExceededError("connection from " + peer() + ": " + why, FailureScope::kEndpoint));
    return;
  }
  FrameConn::OnTick(now);
}

void ServerConn::Reject(StatusCode code, const std::string& reason) {
  host_->refusals().Refused(peer(), reason);  // At most one line a second.
  EndHandshake();
  rejected_ = true;
  OutFrame f;
  f.hdr = MakeHeader(FrameType::kError, 0, reason.size());
  f.hdr.status = static_cast<std::uint16_t>(code);
  f.body = reason;
  FrameConn::Queue(std::move(f));
  CloseAfterFlush(Status(code, reason));
}

Status ServerConn::OnHeader(const WireHeader& h, Sink* sink, std::uint64_t* follow) {
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
  current_ = nullptr;
  if (type == FrameType::kNotify) {
    if (h.length == 0 || h.length > host_->max_notify_bytes()) {
      return InvalidArgumentError("notify of " + std::to_string(h.length) + " bytes from " +
                                  peer() + " exceeds the notify limit");
    }
    *follow = h.length;
    return Status::Ok();
  }
  for (const auto& half : halves_) {
    if (half->Claims(type)) {
      current_ = half.get();
      return half->OnHeader(h, sink, follow);
    }
  }
  return InvalidArgumentError("unexpected frame type " + std::to_string(h.type) + " from " +
                              peer());
}

Status ServerConn::OnClientHello(const WireHeader& h, std::string_view body) {
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
  halves_ = host_->ServedHalves(this);
  EndHandshake();
  // This side's proof, over its host info and table (the client checks it
  // before trusting either).
  HelloOk answer = host_->MakeHelloOk();
  answer.mac = HelloOkMac(host_->secret(), nonce_, hello->client_nonce, answer);
  const std::string ok = EncodeHelloOk(answer);
  OutFrame f;
  f.hdr = MakeHeader(FrameType::kHelloOk, 0, ok.size());
  f.body = ok;
  FrameConn::Send(std::move(f));
  if (seal != nullptr) {
    StartSealing(std::move(seal));  // Every frame after the hello-ok, both ways.
  }
  if ((h.key & kHelloWantsTable) != 0) {
    subscribed_ = true;
    host_->Subscribe(std::static_pointer_cast<ServerConn>(shared_from_this()));
  }
  return Status::Ok();
}

Status ServerConn::OnFrame(const WireHeader& h, std::string_view body) {
  if (rejected_) {
    return Status::Ok();
  }
  switch (static_cast<FrameType>(h.type)) {
    case FrameType::kClientHello:
      return OnClientHello(h, body);
    case FrameType::kNotify:
      host_->DeliverNotify(sender_, std::as_bytes(std::span(body.data(), body.size())));
      return Status::Ok();
    default:
      if (current_ == nullptr) {
        return InternalError("frame type passed header checks but has no handler");
      }
      return current_->OnFrame(h, body);
  }
}

ConnHalf* ServerConn::Owner(const OutFrame& frame) const {
  for (const auto& half : halves_) {
    if (frame.owner == half.get()) {
      return half.get();
    }
  }
  return nullptr;
}

Result<bool> ServerConn::FillPayload(OutFrame& frame) {
  ConnHalf* half = Owner(frame);
  return half != nullptr ? half->FillPayload(frame) : Result<bool>(true);
}

void ServerConn::OnFrameReleased(const OutFrame& frame) {
  if (ConnHalf* half = Owner(frame)) {
    half->OnFrameReleased(frame);
  }
}

void ServerConn::OnClosed(const Status& why) {
  EndHandshake();
  for (const auto& half : halves_) {
    half->OnClosed(why);
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
