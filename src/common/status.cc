#include "sluice/status.h"

namespace sluice {

Status::Status(StatusCode code, std::string_view message, FailureScope scope) {
  if (code != StatusCode::kOk) {
    rep_ = std::make_shared<const Rep>(Rep{code, scope, std::string(message)});
  }
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) {
    return *this;
  }
  std::string msg(context);
  msg += ": ";
  msg += rep_->message;
  return Status(rep_->code, msg, rep_->scope);
}

std::string Status::ToString() const {
  if (ok()) {
    return "OK";
  }
  std::string out(StatusCodeName(code()));
  out += ": ";
  out += rep_->message;
  return out;
}

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case StatusCode::kDataLoss:
      return "DataLoss";
    case StatusCode::kPermissionDenied:
      return "PermissionDenied";
    case StatusCode::kUnimplemented:
      return "Unimplemented";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kUnauthenticated:
      return "Unauthenticated";
  }
  return "Unknown";
}

std::string_view FailureScopeName(FailureScope scope) {
  switch (scope) {
    case FailureScope::kRequest:
      return "Request";
    case FailureScope::kEndpoint:
      return "Endpoint";
    case FailureScope::kTransport:
      return "Transport";
  }
  return "Unknown";
}

}  // namespace sluice
