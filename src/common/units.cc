#include "sluice/units.h"

#include <cctype>
#include <charconv>
#include <cstdio>

namespace sluice {

Result<std::uint64_t> ParseByteSize(std::string_view text) {
  const std::string quoted = "'" + std::string(text) + "'";
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data()) {
    return InvalidArgumentError("size " + quoted + " does not start with a number");
  }
  std::string unit(end, text.data() + text.size());
  for (char& c : unit) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  int shift = -1;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    shift = 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    shift = 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    shift = 30;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    shift = 40;
  }
  if (shift < 0) {
    return InvalidArgumentError("size " + quoted +
                                " has an unknown unit (want B, KiB, MiB, GiB, TiB)");
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) {
    return InvalidArgumentError("size " + quoted + " is too large");
  }
  return value << shift;
}

std::string FormatByteSize(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (v == static_cast<double>(static_cast<std::uint64_t>(v))) {
    std::snprintf(buf, sizeof(buf), "%llu%s", static_cast<unsigned long long>(v), kUnits[u]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f%s", v, kUnits[u]);
  }
  return buf;
}

}  // namespace sluice
