#include "sim/trace.h"

#include <charconv>
#include <cmath>
#include <fstream>

namespace sluice::sim {
namespace {

namespace orch = ::sluice::orchestrator;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

Result<std::vector<TracedJob>> ReadTraceCsv(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    return NotFoundError("trace " + path + ": cannot open");
  }
  std::vector<TracedJob> out;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    const std::string at = "trace " + path + " line " + std::to_string(n) + ": ";
    const std::string_view l = Trim(line);
    if (l.empty() || l.front() == '#' || (n == 1 && l == "t_s,model,priority")) {
      continue;
    }
    std::vector<std::string_view> fields;
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = l.find(',', start);
      fields.push_back(
          Trim(l.substr(start, comma == std::string_view::npos ? l.npos : comma - start)));
      if (comma == std::string_view::npos) {
        break;
      }
      start = comma + 1;
    }
    if (fields.size() < 2 || fields.size() > 3) {
      return InvalidArgumentError(at + "want t_s,model,priority");
    }
    TracedJob j;
    const auto [end, ec] =
        std::from_chars(fields[0].data(), fields[0].data() + fields[0].size(), j.t_s);
    if (ec != std::errc() || end != fields[0].data() + fields[0].size() || !std::isfinite(j.t_s) ||
        j.t_s < 0) {
      return InvalidArgumentError(at + "t_s '" + std::string(fields[0]) +
                                  "' is not a time in seconds >= 0");
    }
    if (!out.empty() && j.t_s < out.back().t_s) {
      return InvalidArgumentError(at + "t_s " + std::string(fields[0]) +
                                  " is before the line above's");
    }
    if (fields[1].empty()) {
      return InvalidArgumentError(at + "no model");
    }
    j.model = std::string(fields[1]);
    const std::string_view priority = fields.size() == 3 ? fields[2] : std::string_view();
    const std::optional<orch::PriorityClass> known = orch::ParsePriority(priority);
    if (known) {
      j.priority = *known;
    } else if (!priority.empty()) {
      return InvalidArgumentError(at + "priority '" + std::string(priority) +
                                  "' is not interactive, standard or batch");
    }
    out.push_back(std::move(j));
  }
  if (out.empty()) {
    return InvalidArgumentError("trace " + path + ": no jobs");
  }
  return out;
}

}  // namespace sluice::sim
