#include "bench/job_timeline.h"

#include <nlohmann/json.hpp>
#include <sstream>

namespace sluice::bench {

using nlohmann::json;

Timeline ReadTimeline(httplib::Client& http, const std::string& id) {
  Timeline t;
  auto res = http.Get("/v1/jobs/" + id + "/events");
  if (!res || res->status != 200) {
    return t;
  }
  std::istringstream lines(res->body);
  std::string open_stage;
  double open_at = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: ", 0) != 0) {
      continue;
    }
    const json e = json::parse(line.substr(6), nullptr, false);
    if (!e.is_object()) {
      continue;
    }
    const std::string type = e.value("type", "");
    const double at = e.value("t_ms", 0.0) / 1000.0;
    if (type == "step" || type == "queued") {
      continue;
    }
    if (type == "cache_hit") {
      t.cache_hit = true;
      continue;
    }
    if (type == "first_output") {
      if (t.ttff_s < 0) {
        t.ttff_s = at;
        t.first_output_in_stage_s = open_stage.empty() ? -1 : at - open_at;
      }
      continue;
    }
    if (!open_stage.empty()) {
      t.busy_s[open_stage] += at - open_at;
      open_stage.clear();
    }
    if (type == "stage_started") {
      open_stage = e.value("stage", "");
      open_at = at;
    } else if (type == "done") {
      t.succeeded = true;
      t.latency_s = at;
    }
  }
  return t;
}

}  // namespace sluice::bench
