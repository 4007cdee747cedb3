// The store master's fast lane as a peer speaks it: a 16-byte request or
// response header, then a body that is the method's protobuf request (or
// the response / error text).
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "proto/store/v1/master.pb.h"
#include "store/fastlane/frame.h"

namespace {

namespace pb = ::sluice::store::v1;
using namespace sluice::internal::fastlane;

template <typename T>
void Parse(const std::uint8_t* body, int len) {
  T r;
  (void)r.ParseFromArray(body, len);
}

// Parses `body` as the request type of `m`, as the master does.
void ParseBody(Method m, const std::uint8_t* body, int len) {
  switch (m) {
    case Method::kPutStart:
      return Parse<pb::PutStartRequest>(body, len);
    case Method::kPutEnd:
      return Parse<pb::PutEndRequest>(body, len);
    case Method::kGetStart:
      return Parse<pb::GetStartRequest>(body, len);
    case Method::kGetEnd:
      return Parse<pb::GetEndRequest>(body, len);
    case Method::kPutReserved:
      return Parse<pb::PutReservedRequest>(body, len);
    case Method::kPutRevoke:
      return Parse<pb::PutRevokeRequest>(body, len);
    case Method::kUnreserve:
      return Parse<pb::UnreserveRequest>(body, len);
    case Method::kWaitFor:
      return Parse<pb::WaitForRequest>(body, len);
    default:
      return Parse<pb::KeyRequest>(body, len);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Protobuf logs every string field that is not UTF-8; quiet for speed.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kHeaderSize) {
    return 0;
  }
  const auto* head = reinterpret_cast<const std::byte*>(data);
  const std::uint8_t* body = data + kHeaderSize;
  const std::size_t body_len = size - kHeaderSize;
  auto req = DecodeRequest(head);
  if (req.ok()) {
    std::byte again[kHeaderSize];
    Encode(*req, again);
    auto twice = DecodeRequest(again);
    if (!twice.ok() || twice->body_len != req->body_len || twice->method != req->method ||
        twice->flags != req->flags) {
      std::abort();
    }
    (void)MethodName(static_cast<Method>(req->method));
    if (req->body_len <= body_len) {
      ParseBody(static_cast<Method>(req->method), body, static_cast<int>(req->body_len));
    }
  }
  auto resp = DecodeResponse(head);
  if (resp.ok() && resp->code == 0 && resp->body_len <= body_len) {
    Parse<pb::GetStartResponse>(body, static_cast<int>(resp->body_len));
  }
  return 0;
}
