#include "sluice/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <ctime>
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

namespace {

thread_local std::vector<std::pair<std::string, std::string>> t_fields;

void Put(spdlog::memory_buf_t& out, std::string_view s) {
  out.append(s.data(), s.data() + s.size());
}

void AppendJsonString(std::string_view in, spdlog::memory_buf_t& out) {
  out.push_back('"');
  for (const char c : in) {
    switch (c) {
      case '"':
        Put(out, "\\\"");
        break;
      case '\\':
        Put(out, "\\\\");
        break;
      case '\n':
        Put(out, "\\n");
        break;
      case '\r':
        Put(out, "\\r");
        break;
      case '\t':
        Put(out, "\\t");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\u%04x", c);
          Put(out, std::string_view(esc, 6));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

// One JSON object per line: time, level, msg, then the thread's fields
// (LogFields), the innermost value of each name.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto t = msg.time.time_since_epoch();
    const std::time_t secs = std::chrono::duration_cast<std::chrono::seconds>(t).count();
    const int ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(t).count() % 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char when[40];
    const std::size_t n = std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(when + n, sizeof when - n, ".%03dZ", ms);
    Put(dest, "{\"time\":\"");
    Put(dest, when);
    Put(dest, "\",\"level\":");
    const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
    AppendJsonString(std::string_view(level.data(), level.size()), dest);
    Put(dest, ",\"msg\":");
    AppendJsonString(std::string_view(msg.payload.data(), msg.payload.size()), dest);
    const auto& fields = t_fields;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      bool shadowed = false;
      for (std::size_t k = i + 1; k < fields.size() && !shadowed; ++k) {
        shadowed = fields[k].first == fields[i].first;
      }
      if (shadowed) {
        continue;
      }
      dest.push_back(',');
      AppendJsonString(fields[i].first, dest);
      dest.push_back(':');
      AppendJsonString(fields[i].second, dest);
    }
    Put(dest, "}\n");
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

LogFields::LogFields(std::initializer_list<std::pair<std::string_view, std::string>> fields) {
  for (const auto& [name, value] : fields) {
    t_fields.emplace_back(std::string(name), value);
    ++added_;
  }
}

LogFields::~LogFields() {
  t_fields.resize(t_fields.size() - added_);
}

const std::vector<std::pair<std::string, std::string>>& LogFields::Current() {
  return t_fields;
}

}  // namespace internal

Status SetLogFormat(std::string_view format) {
  if (format == "json") {
    internal::Logger().set_formatter(std::make_unique<internal::JsonFormatter>());
  } else if (format == "text") {
    internal::Logger().set_formatter(std::make_unique<spdlog::pattern_formatter>());
  } else {
    return InvalidArgumentError("unknown log format '" + std::string(format) +
                                "' (want text or json)");
  }
  return Status::Ok();
}

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
