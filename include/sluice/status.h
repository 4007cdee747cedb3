// sluice/status.h
//
// Status reports the outcome of an operation that produces no value;
// Result<T> carries either a T or a non-OK Status. Every fallible function in
// the C++ API returns one of the two. Exceptions never cross a sluice API
// boundary; the Python binding turns a non-OK Status into a typed exception.
//
// An OK Status owns no memory, so returning Status::Ok() on a hot path costs
// one null pointer. Error state is immutable and shared between copies.
//
// Thread safety: a Status may be read from many threads at once.

#ifndef SLUICE_STATUS_H_
#define SLUICE_STATUS_H_

#include <cassert>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace sluice {

// Callers branch on the code, never on message text. Pick the most specific.
enum class StatusCode : std::uint8_t {
  kOk = 0,
  kCancelled,           // The caller cancelled the operation.
  kInvalidArgument,     // Bad input; the same call can never succeed.
  kNotFound,            // Key, segment, peer or queue does not exist.
  kAlreadyExists,       // Objects are immutable: a second Put of a key.
  kResourceExhausted,   // No credit, window or pool space: back off, retry.
  kFailedPrecondition,  // State forbids the call, e.g. the lease expired.
  kUnavailable,         // Peer or master unreachable: retry, maybe elsewhere.
  kDeadlineExceeded,    // Gave up waiting; the operation may still land.
  kDataLoss,            // Checksum mismatch or truncated payload.
  kPermissionDenied,    // The peer forbids it: region access bits, wrong secret.
  kUnimplemented,       // This transport or backend lacks the capability.
  kInternal,            // A broken invariant: a bug, not a condition.
  kUnauthenticated,     // No or a wrong cluster credential (see sluice/security.h).
};
// The highest code; codes arriving from peers above it are unknown.
inline constexpr StatusCode kMaxStatusCode = StatusCode::kUnauthenticated;

// How far a failure reaches. Recovery keys off it: the orchestrator retries
// the request on kRequest, reconnects on kEndpoint, and moves the work to
// another transport or node on kTransport.
enum class FailureScope : std::uint8_t { kRequest, kEndpoint, kTransport };

class [[nodiscard]] Status {
 public:
  Status() noexcept = default;  // OK. Prefer Status::Ok() at call sites.
  Status(StatusCode code, std::string_view message, FailureScope scope = FailureScope::kRequest);

  static Status Ok() noexcept { return Status(); }

  bool ok() const noexcept { return rep_ == nullptr; }
  StatusCode code() const noexcept { return ok() ? StatusCode::kOk : rep_->code; }
  FailureScope scope() const noexcept { return ok() ? FailureScope::kRequest : rep_->scope; }
  std::string_view message() const noexcept {
    return ok() ? std::string_view() : std::string_view(rep_->message);
  }

  // Returns a copy whose message reads "<context>: <message>". OK stays OK.
  Status WithContext(std::string_view context) const;

  // "OK", or "<CodeName>: <message>" for errors.
  std::string ToString() const;

 private:
  struct Rep {
    StatusCode code;
    FailureScope scope;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // Null iff OK.
};

std::string_view StatusCodeName(StatusCode code);

inline Status InvalidArgumentError(std::string_view m) {
  return Status(StatusCode::kInvalidArgument, m);
}
inline Status NotFoundError(std::string_view m) {
  return Status(StatusCode::kNotFound, m);
}
inline Status ResourceExhaustedError(std::string_view m) {
  return Status(StatusCode::kResourceExhausted, m);
}
inline Status UnavailableError(std::string_view m, FailureScope s) {
  return Status(StatusCode::kUnavailable, m, s);
}
inline Status AlreadyExistsError(std::string_view m) {
  return Status(StatusCode::kAlreadyExists, m);
}
inline Status FailedPreconditionError(std::string_view m) {
  return Status(StatusCode::kFailedPrecondition, m);
}
inline Status DeadlineExceededError(std::string_view m, FailureScope s = FailureScope::kRequest) {
  return Status(StatusCode::kDeadlineExceeded, m, s);
}
inline Status PermissionDeniedError(std::string_view m) {
  return Status(StatusCode::kPermissionDenied, m);
}
inline Status UnimplementedError(std::string_view m) {
  return Status(StatusCode::kUnimplemented, m);
}
inline Status InternalError(std::string_view m) {
  return Status(StatusCode::kInternal, m);
}
inline Status UnauthenticatedError(std::string_view m) {
  return Status(StatusCode::kUnauthenticated, m);
}

// "Request", "Endpoint" or "Transport".
std::string_view FailureScopeName(FailureScope scope);

// Holds a T on success, otherwise the non-OK Status explaining its absence.
template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::decay_t<T>, Status>, "use Status, not Result<Status>");

 public:
  Result(T value) : data_(std::move(value)) {}      // NOLINT: implicit on purpose
  Result(Status error) : data_(std::move(error)) {  // NOLINT
    assert(!std::get<Status>(data_).ok() && "OK Status carries no value");
  }

  bool ok() const noexcept { return std::holds_alternative<T>(data_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(data_); }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<Status, T> data_;
};

}  // namespace sluice

#define SLUICE_CONCAT_INNER_(a, b) a##b
#define SLUICE_CONCAT_(a, b) SLUICE_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` yields a non-OK Status.
#define SLUICE_RETURN_IF_ERROR(expr)          \
  do {                                        \
    ::sluice::Status sluice_status_ = (expr); \
    if (!sluice_status_.ok()) {               \
      return sluice_status_;                  \
    }                                         \
  } while (false)

// `lhs = value` if the Result<T> from `expr` is OK; otherwise returns its
// Status. Expands to several statements: do not use as an if/else body.
#define SLUICE_ASSIGN_OR_RETURN(lhs, expr) \
  SLUICE_ASSIGN_OR_RETURN_IMPL_(SLUICE_CONCAT_(sluice_result_, __LINE__), lhs, expr)
#define SLUICE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) {                                    \
    return tmp.status();                              \
  }                                                   \
  lhs = std::move(tmp).value()

#endif  // SLUICE_STATUS_H_
