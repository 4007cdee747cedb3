// Internal logging over one spdlog logger named "sluice" that writes to
// stderr (stdout stays free for program output, e.g. JSON figures).
// Format strings use fmt syntax:
//   SLUICE_LOG(warn, "peer {} closed: {}", peer, status.ToString());
#ifndef SLUICE_COMMON_LOG_H_
#define SLUICE_COMMON_LOG_H_

#include <spdlog/spdlog.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::internal {
spdlog::logger& Logger();

// What the calling thread is working on, for the lines it logs while this
// object lives: JSON logs (SetLogFormat("json")) carry each field beside
// the message ("job", "stage", "worker"). Nested scopes add fields (a name
// given again shadows the outer one) and restore on destruction, in
// reverse order of construction on the same thread. The values are copied.
class LogFields {
 public:
  LogFields(std::initializer_list<std::pair<std::string_view, std::string>> fields);
  ~LogFields();
  LogFields(const LogFields&) = delete;
  LogFields& operator=(const LogFields&) = delete;

  // The calling thread's fields, outermost first (a name may repeat: the
  // last one counts).
  static const std::vector<std::pair<std::string, std::string>>& Current();

 private:
  std::size_t added_ = 0;
};
}  // namespace sluice::internal

#define SLUICE_LOG(level, ...) ::sluice::internal::Logger().level(__VA_ARGS__)

#endif  // SLUICE_COMMON_LOG_H_
