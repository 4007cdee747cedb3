#include "sluice/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <string>

#include "common/log.h"

namespace sluice {
namespace internal {

spdlog::logger& Logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::get("sluice");
    if (l == nullptr) {
      l = spdlog::stderr_color_mt("sluice");
    }
    return l;
  }();
  return *logger;
}

}  // namespace internal

Status SetLogLevel(std::string_view level) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(std::string(level));
  // from_str maps unknown names to "off"; only accept "off" when asked for.
  if (parsed == spdlog::level::off && level != "off") {
    return InvalidArgumentError("unknown log level '" + std::string(level) +
                                "' (want trace, debug, info, warn, error or off)");
  }
  internal::Logger().set_level(parsed);
  spdlog::set_level(parsed);
  return Status::Ok();
}

}  // namespace sluice
