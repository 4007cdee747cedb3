#include "transfer/control/handshake.h"

namespace sluice::internal {
namespace {

Status ReadFrame(int fd, WireHeader* h, std::string* body, const std::string& peer) {
  SLUICE_RETURN_IF_ERROR(RecvAll(fd, h, sizeof(*h)));
  if (h->magic != kWireMagic) {
    return UnavailableError(peer + " is not a sluice transfer engine (bad magic)",
                            FailureScope::kEndpoint);
  }
  if (h->length > kMaxControlBody) {
    return UnavailableError(peer + " sent an oversized handshake frame", FailureScope::kEndpoint);
  }
  body->resize(h->length);
  return RecvAll(fd, body->data(), body->size());
}

}  // namespace

Result<HandshakeResult> ClientHandshake(const HostPort& peer, const std::string& secret,
                                        const std::string& self_endpoint, bool wants_table,
                                        bool encrypt, std::chrono::milliseconds timeout) {
  if (encrypt && secret.empty()) {
    return InvalidArgumentError("encrypted payload needs a shared secret");
  }
  const std::string name = peer.ToString();
  SLUICE_ASSIGN_OR_RETURN(UniqueFd fd, ConnectTcp(peer, timeout));
  SLUICE_RETURN_IF_ERROR(SetIoTimeout(fd.get(), timeout));
  WireHeader h;
  std::string body;
  Status s = ReadFrame(fd.get(), &h, &body, name);
  if (!s.ok()) {
    return s.WithContext("handshake with " + name);
  }
  if (h.version != kWireVersion) {
    return FailedPreconditionError(name + " speaks protocol version " + std::to_string(h.version) +
                                   ", this engine speaks " + std::to_string(kWireVersion));
  }
  if (static_cast<FrameType>(h.type) != FrameType::kServerHello || body.size() != kNonceBytes) {
    return UnavailableError("handshake with " + name + ": malformed server hello",
                            FailureScope::kEndpoint);
  }
  std::array<std::uint8_t, kNonceBytes> nonce;
  std::memcpy(nonce.data(), body.data(), nonce.size());
  ClientHello hello;
  RandomBytes(hello.client_nonce.data(), hello.client_nonce.size());
  hello.endpoint = self_endpoint;
  hello.host = HostInfo::Self();
  hello.mac = ClientHelloMac(secret, nonce, hello);
  const std::string out = EncodeClientHello(hello);
  WireHeader oh = MakeHeader(FrameType::kClientHello, 0, out.size());
  oh.key = (wants_table ? kHelloWantsTable : 0) | (encrypt ? kHelloWantsEncryption : 0);
  SLUICE_RETURN_IF_ERROR(SendAll(fd.get(), &oh, sizeof(oh)));
  SLUICE_RETURN_IF_ERROR(SendAll(fd.get(), out.data(), out.size()));
  s = ReadFrame(fd.get(), &h, &body, name);
  if (!s.ok()) {
    return s.WithContext("handshake with " + name);
  }
  if (static_cast<FrameType>(h.type) == FrameType::kError) {
    auto code = static_cast<StatusCode>(h.status);
    if (h.status == 0 || h.status > static_cast<std::uint16_t>(kMaxStatusCode)) {
      code = StatusCode::kUnavailable;
    }
    return Status(code, name + " rejected the handshake: " + body, FailureScope::kEndpoint);
  }
  if (static_cast<FrameType>(h.type) != FrameType::kHelloOk) {
    return UnavailableError("handshake with " + name + ": unexpected reply",
                            FailureScope::kEndpoint);
  }
  SLUICE_ASSIGN_OR_RETURN(HelloOk ok, DecodeHelloOk(body));
  // Nothing the peer says (host, table) is trusted before its proof: a
  // fake target without the secret cannot claim this host and steer
  // same-host copies to addresses of its choosing.
  if (!MacEquals(ok.mac, HelloOkMac(secret, nonce, hello.client_nonce, ok))) {
    return Status(StatusCode::kPermissionDenied,
                  name + " did not prove the shared secret in its handshake",
                  FailureScope::kEndpoint);
  }
  std::unique_ptr<FrameSeal> seal;
  if (!secret.empty()) {
    SLUICE_ASSIGN_OR_RETURN(seal, FrameSeal::Create(secret, nonce, hello.client_nonce, encrypt,
                                                    /*initiator=*/true));
  }
  SLUICE_RETURN_IF_ERROR(SetIoTimeout(fd.get(), std::chrono::milliseconds(0)));
  SLUICE_RETURN_IF_ERROR(SetNonBlocking(fd.get(), true));
  return HandshakeResult{std::move(fd), std::move(ok), std::move(seal)};
}

}  // namespace sluice::internal
