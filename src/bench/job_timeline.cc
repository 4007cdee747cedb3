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
  double ready_at = 0;  // The stage to come could start from here.
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
    if (type == "queued") {
      ready_at = at;
      continue;
    }
    if (type == "step") {
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
    if (type == "stage_done" && !open_stage.empty() && e.value("stage", "") == open_stage) {
      std::map<std::string, double>& ms = t.stage_ms[open_stage];
      ms["busy"] = (at - open_at) * 1000;
      if (e.contains("timings_ms") && e["timings_ms"].is_object()) {
        for (const auto& [name, v] : e["timings_ms"].items()) {
          if (v.is_number()) {
            ms[name] = v.get<double>();
          }
        }
      }
      if (ms.count("run") != 0) {
        ms["overhead"] = ms["busy"] - ms["run"];
      }
      ready_at = at;
    }
    if (!open_stage.empty()) {
      t.busy_s[open_stage] += at - open_at;
      open_stage.clear();
    }
    if (type == "stage_started") {
      open_stage = e.value("stage", "");
      open_at = at;
      t.stage_ms[open_stage]["queue"] = (at - ready_at) * 1000;
    } else if (type == "done") {
      t.succeeded = true;
      t.latency_s = at;
    }
  }
  return t;
}

}  // namespace sluice::bench
