#include "common/rpc_status.h"

#include <string>

namespace sluice::internal {
namespace {

struct CodePair {
  StatusCode ours;
  grpc::StatusCode theirs;
};
constexpr CodePair kCodes[] = {
    {StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
    {StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
    {StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
    {StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
    {StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
    {StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
    {StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
    {StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
    {StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
    {StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
    {StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
    {StatusCode::kInternal, grpc::StatusCode::INTERNAL},
    {StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
};

}  // namespace

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) {
    return grpc::Status::OK;
  }
  for (const CodePair& c : kCodes) {
    if (c.ours == s.code()) {
      return grpc::Status(c.theirs, std::string(s.message()));
    }
  }
  return grpc::Status(grpc::StatusCode::INTERNAL, std::string(s.message()));
}

Status FromGrpc(const grpc::Status& s, std::string_view what) {
  if (s.ok()) {
    return Status::Ok();
  }
  StatusCode code = StatusCode::kInternal;
  for (const CodePair& c : kCodes) {
    if (c.theirs == s.error_code()) {
      code = c.ours;
    }
  }
  // Transport-level failures of the RPC reach the whole master endpoint.
  const bool endpoint = code == StatusCode::kUnavailable ||
                        (code == StatusCode::kDeadlineExceeded && s.error_message().empty());
  return Status(code, std::string(what) + ": " + s.error_message(),
                endpoint ? FailureScope::kEndpoint : FailureScope::kRequest);
}

}  // namespace sluice::internal
