#include "common/protobuf_log.h"

#include <google/protobuf/stubs/logging.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/log.h"

namespace sluice::internal {

namespace {

std::atomic<std::int64_t> next_line_ms{0};
std::atomic<std::uint64_t> dropped{0};

std::int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Handle(google::protobuf::LogLevel level, const char* /*file*/, int /*line*/,
            const std::string& message) {
  if (level == google::protobuf::LOGLEVEL_FATAL) {
    SLUICE_LOG(critical, "protobuf: {}", message);
    return;
  }
  std::int64_t due = next_line_ms.load(std::memory_order_relaxed);
  const std::int64_t now = NowMs();
  if (now < due || !next_line_ms.compare_exchange_strong(due, now + 1000)) {
    dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const std::uint64_t n = dropped.exchange(0, std::memory_order_relaxed);
  if (n > 0) {
    SLUICE_LOG(warn, "protobuf: {} ({} more such lines in the last second)", message, n);
  } else {
    SLUICE_LOG(warn, "protobuf: {}", message);
  }
}

}  // namespace

void RouteProtobufLogs() {
  static std::once_flag once;
  std::call_once(once, [] { google::protobuf::SetLogHandler(&Handle); });
}

}  // namespace sluice::internal
