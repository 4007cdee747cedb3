#include "store/fastlane/frame.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/net.h"
#include "common/security_keys.h"

namespace sluice::internal::fastlane {
namespace {

void Put32(std::byte* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) {
    p[i] = static_cast<std::byte>(v >> (8 * i));
  }
}
void Put16(std::byte* p, std::uint16_t v) {
  p[0] = static_cast<std::byte>(v);
  p[1] = static_cast<std::byte>(v >> 8);
}
std::uint32_t Get32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  }
  return v;
}
std::uint16_t Get16(const std::byte* p) {
  return static_cast<std::uint16_t>(static_cast<std::uint16_t>(p[0]) |
                                    (static_cast<std::uint16_t>(p[1]) << 8));
}

}  // namespace

void Encode(const RequestHeader& h, std::byte out[kHeaderSize]) {
  Put32(out, h.magic);
  Put32(out + 4, h.body_len);
  Put16(out + 8, h.method);
  Put16(out + 10, h.flags);
  Put32(out + 12, h.reserved);
}

void Encode(const ResponseHeader& h, std::byte out[kHeaderSize]) {
  Put32(out, h.magic);
  Put32(out + 4, h.body_len);
  out[8] = static_cast<std::byte>(h.code);
  out[9] = static_cast<std::byte>(h.scope);
  Put16(out + 10, h.reserved0);
  Put32(out + 12, h.reserved1);
}

Result<RequestHeader> DecodeRequest(const std::byte in[kHeaderSize]) {
  RequestHeader h;
  h.magic = Get32(in);
  h.body_len = Get32(in + 4);
  h.method = Get16(in + 8);
  h.flags = Get16(in + 10);
  h.reserved = Get32(in + 12);
  if (h.magic != kRequestMagic) {
    return InvalidArgumentError("fast lane: bad request magic");
  }
  if (h.body_len > kMaxRequestBody) {
    return InvalidArgumentError("fast lane: request body of " + std::to_string(h.body_len) +
                                " bytes exceeds " + std::to_string(kMaxRequestBody));
  }
  if (h.method == 0 || h.method > kMaxMethod) {
    return InvalidArgumentError("fast lane: unknown method " + std::to_string(h.method));
  }
  if ((h.flags & ~kFlagOneWay) != 0 || h.reserved != 0) {
    return InvalidArgumentError("fast lane: unknown flags or nonzero reserved bits");
  }
  return h;
}

Result<ResponseHeader> DecodeResponse(const std::byte in[kHeaderSize]) {
  ResponseHeader h;
  h.magic = Get32(in);
  h.body_len = Get32(in + 4);
  h.code = static_cast<std::uint8_t>(in[8]);
  h.scope = static_cast<std::uint8_t>(in[9]);
  h.reserved0 = Get16(in + 10);
  h.reserved1 = Get32(in + 12);
  if (h.magic != kResponseMagic) {
    return InvalidArgumentError("fast lane: bad response magic");
  }
  if (h.body_len > kMaxResponseBody) {
    return InvalidArgumentError("fast lane: response body of " + std::to_string(h.body_len) +
                                " bytes exceeds " + std::to_string(kMaxResponseBody));
  }
  if (h.code > static_cast<std::uint8_t>(kMaxStatusCode) ||
      h.scope > static_cast<std::uint8_t>(FailureScope::kTransport)) {
    return InvalidArgumentError("fast lane: unknown status code or scope in response");
  }
  return h;
}

Status SendHeaderAndBody(int fd, const std::byte head[kHeaderSize], std::string_view body,
                         LaneMac* mac) {
  const bool sealed = mac != nullptr && mac->active();
  FrameMac m{};
  if (sealed) {
    m = mac->Next(head, body);
  }
  iovec iov[3] = {{const_cast<std::byte*>(head), kHeaderSize},
                  {const_cast<char*>(body.data()), body.size()},
                  {m.data(), m.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = sealed ? 3 : 2;
  ssize_t n;
  do {
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return ErrnoStatus("fast lane send", errno);
  }
  // Finish a short write part by part.
  auto left = static_cast<std::size_t>(n);
  for (std::size_t i = 0; i < msg.msg_iovlen; ++i) {
    if (left >= iov[i].iov_len) {
      left -= iov[i].iov_len;
      continue;
    }
    SLUICE_RETURN_IF_ERROR(
        SendAll(fd, static_cast<char*>(iov[i].iov_base) + left, iov[i].iov_len - left));
    left = 0;
  }
  return Status::Ok();
}

const char* MethodName(Method m) {
  switch (m) {
    case Method::kPutStart:
      return "PutStart";
    case Method::kPutEnd:
      return "PutEnd";
    case Method::kPutRevoke:
      return "PutRevoke";
    case Method::kGetStart:
      return "GetStart";
    case Method::kGetEnd:
      return "GetEnd";
    case Method::kRemove:
      return "Remove";
    case Method::kExists:
      return "Exists";
    case Method::kWaitFor:
      return "WaitFor";
    case Method::kPutReserved:
      return "PutReserved";
    case Method::kHello:
      return "Hello";
    case Method::kUnreserve:
      return "Unreserve";
  }
  return "unknown";
}

std::array<std::uint8_t, 32> HelloProof(std::string_view key, bool from_master,
                                        std::string_view master_nonce,
                                        std::string_view client_nonce) {
  std::string data = from_master ? "sluice fast lane master" : "sluice fast lane client";
  data.append(master_nonce).append(client_nonce);
  return Hmac(key, data);
}

LaneMac::LaneMac(std::string_view lane_key, bool to_master, std::string_view master_nonce,
                 std::string_view client_nonce) {
  std::string data =
      to_master ? "sluice fast lane frames to master" : "sluice fast lane frames to client";
  data.append(master_nonce).append(client_nonce);
  const std::array<std::uint8_t, 32> k = Hmac(lane_key, data);
  mac_ = KeyedHmac(std::string_view(reinterpret_cast<const char*>(k.data()), k.size()));
  keyed_ = true;
}

FrameMac LaneMac::Next(const std::byte head[kHeaderSize], std::string_view body) {
  const std::uint64_t number = next_++;
  // All zeros if OpenSSL failed: the frame then fails at the other end.
  std::array<std::uint8_t, 32> full{};
  (void)mac_.Compute({std::string_view(reinterpret_cast<const char*>(&number), sizeof(number)),
                      std::string_view(reinterpret_cast<const char*>(head), kHeaderSize), body},
                     &full);
  FrameMac out;
  std::memcpy(out.data(), full.data(), out.size());
  return out;
}

bool LaneMac::CheckNext(const std::byte head[kHeaderSize], std::string_view body,
                        const FrameMac& mac) {
  const FrameMac want = Next(head, body);
  return SecureEquals(std::string_view(reinterpret_cast<const char*>(want.data()), want.size()),
                      std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
}

}  // namespace sluice::internal::fastlane
