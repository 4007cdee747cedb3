// Internal logging over one spdlog logger named "sluice" that writes to
// stderr (stdout stays free for program output, e.g. JSON figures).
// Format strings use fmt syntax:
//   SLUICE_LOG(warn, "peer {} closed: {}", peer, status.ToString());
#ifndef SLUICE_COMMON_LOG_H_
#define SLUICE_COMMON_LOG_H_

#include <spdlog/spdlog.h>

namespace sluice::internal {
spdlog::logger& Logger();
}  // namespace sluice::internal

#define SLUICE_LOG(level, ...) ::sluice::internal::Logger().level(__VA_ARGS__)

#endif  // SLUICE_COMMON_LOG_H_
