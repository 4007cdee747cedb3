// Internal logging macros over spdlog's default logger. Format strings use
// fmt syntax: SLUICE_LOG(warn, "peer {} closed: {}", peer, status.ToString()).
#ifndef SLUICE_COMMON_LOG_H_
#define SLUICE_COMMON_LOG_H_

#include <spdlog/spdlog.h>

#define SLUICE_LOG(level, ...) ::spdlog::level(__VA_ARGS__)

#endif  // SLUICE_COMMON_LOG_H_
