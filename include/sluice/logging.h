// sluice/logging.h
//
// Process-wide log settings. sluice logs through spdlog to stderr; every
// library component shares one logger named "sluice". Errors are logged once,
// where they are decided (a rejected connection, a failed peer), never again
// by each caller that propagates the Status.
//
// Thread safety: SetLogLevel may be called from any thread at any time.

#ifndef SLUICE_LOGGING_H_
#define SLUICE_LOGGING_H_

#include <string_view>

#include "sluice/status.h"

namespace sluice {

// Sets the minimum level: "trace", "debug", "info", "warn", "error", "off".
// Errors: kInvalidArgument for any other name (the level is left unchanged).
Status SetLogLevel(std::string_view level);

}  // namespace sluice

#endif  // SLUICE_LOGGING_H_
