// sluice/logging.h
//
// Process-wide log settings. sluice logs through spdlog to stderr; every
// library component shares one logger named "sluice". Errors are logged once,
// where they are decided (a rejected connection, a failed peer), never again
// by each caller that propagates the Status.
//
// Thread safety: SetLogLevel may be called from any thread at any time;
// SetLogFormat before other threads log (at start-up).

#ifndef SLUICE_LOGGING_H_
#define SLUICE_LOGGING_H_

#include <string_view>

#include "sluice/status.h"

namespace sluice {

// Sets the minimum level: "trace", "debug", "info", "warn", "error", "off".
// Errors: kInvalidArgument for any other name (the level is left unchanged).
Status SetLogLevel(std::string_view level);

// Sets how each line is written: "text" (the default: time, logger, level,
// message) or "json" (one JSON object per line: "time" in UTC ISO 8601
// with milliseconds, "level", "msg", and the fields of what the logging
// thread is working on — "job" (its public id), "stage", "worker" — when
// it works for one). Errors: kInvalidArgument for any other name (the
// format is left unchanged).
Status SetLogFormat(std::string_view format);

}  // namespace sluice

#endif  // SLUICE_LOGGING_H_
