#include "sluice/logging.h"

#include <string>

#include <spdlog/spdlog.h>

namespace sluice {

Status SetLogLevel(std::string_view level) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(std::string(level));
  // from_str maps unknown names to "off"; only accept "off" when asked for.
  if (parsed == spdlog::level::off && level != "off") {
    return InvalidArgumentError("unknown log level '" + std::string(level) +
                                "' (want trace, debug, info, warn, error or off)");
  }
  spdlog::set_level(parsed);
  return Status::Ok();
}

}  // namespace sluice
