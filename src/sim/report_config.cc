// ReadReportConfig: the YAML of `sluice sim report`, every key checked.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "sim/report.h"

namespace sluice::sim {
namespace {

namespace orch = ::sluice::orchestrator;

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  Status Error(const std::string& where, const std::string& what) const {
    return InvalidArgumentError(file_ + ": " + where + ": " + what);
  }

  // Refuses a key of `map` outside `known`.
  Status OnlyKeys(const YAML::Node& map, const std::string& where,
                  const std::set<std::string>& known) const {
    if (!map.IsMap()) {
      return Error(where.empty() ? "top level" : where, "must be a mapping");
    }
    for (const auto& kv : map) {
      const std::string key = kv.first.as<std::string>();
      if (known.count(key) == 0) {
        std::string list;
        for (const std::string& k : known) {
          list += (list.empty() ? "" : ", ") + k;
        }
        return Error(Join(where, key), "unknown key (" + list + ")");
      }
    }
    return Status::Ok();
  }

  template <typename T>
  Status Get(const YAML::Node& map, const std::string& where, const std::string& key,
             T* out) const {
    const YAML::Node v = map[key];
    if (!v) {
      return Status::Ok();
    }
    try {
      *out = v.as<T>();
    } catch (const YAML::Exception&) {
      return Error(Join(where, key), "not a " + TypeName<T>());
    }
    return Status::Ok();
  }

  static std::string Join(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }

 private:
  template <typename T>
  static std::string TypeName() {
    if constexpr (std::is_same_v<T, std::string>) {
      return "string";
    } else if constexpr (std::is_integral_v<T>) {
      return "whole number";
    } else if constexpr (std::is_floating_point_v<T>) {
      return "number";
    } else {
      return "list of numbers";
    }
  }

  std::string file_;
};

Status ReadModel(const Reader& r, const YAML::Node& n, const std::string& where, ReportModel* m) {
  SLUICE_RETURN_IF_ERROR(
      r.OnlyKeys(n, where, {"model", "priority", "gpus", "hours", "load", "loads", "slo"}));
  SLUICE_RETURN_IF_ERROR(r.Get(n, where, "model", &m->model));
  if (m->model.empty()) {
    return r.Error(Reader::Join(where, "model"),
                   "required (a profile: flux-1024, wan2.1-480p, ...)");
  }
  std::string priority = orch::PriorityName(m->priority);
  SLUICE_RETURN_IF_ERROR(r.Get(n, where, "priority", &priority));
  const std::optional<orch::PriorityClass> known = orch::ParsePriority(priority);
  if (known) {
    m->priority = *known;
  } else {
    return r.Error(Reader::Join(where, "priority"),
                   "'" + priority + "' is not interactive, standard or batch");
  }
  SLUICE_RETURN_IF_ERROR(r.Get(n, where, "gpus", &m->gpus));
  SLUICE_RETURN_IF_ERROR(r.Get(n, where, "hours", &m->hours));
  SLUICE_RETURN_IF_ERROR(r.Get(n, where, "load", &m->load));
  SLUICE_RETURN_IF_ERROR(r.Get(n, where, "loads", &m->loads));
  if (m->gpus < 3 || m->gpus > 100000) {
    return r.Error(Reader::Join(where, "gpus"), "must be in [3, 100000]");
  }
  if (m->hours < 0 || m->hours > 1000) {
    return r.Error(Reader::Join(where, "hours"), "must be in [0, 1000] (0: the report's)");
  }
  if (m->loads.empty()) {
    m->loads = {0.3, 0.5, 0.7, 0.9, 1.1};
  }
  auto in_range = [](double l) { return l > 0 && l <= 2; };
  if (!in_range(m->load) || !std::all_of(m->loads.begin(), m->loads.end(), in_range)) {
    return r.Error(Reader::Join(where, "load"), "loads must be in (0, 2]");
  }
  const YAML::Node slo = n["slo"];
  const std::string at = Reader::Join(where, "slo");
  if (!slo) {
    return r.Error(at, "required ({metric: latency|ttff, p99_s: S})");
  }
  SLUICE_RETURN_IF_ERROR(r.OnlyKeys(slo, at, {"metric", "p99_s"}));
  std::string metric = "latency";
  SLUICE_RETURN_IF_ERROR(r.Get(slo, at, "metric", &metric));
  if (metric != "latency" && metric != "ttff") {
    return r.Error(Reader::Join(at, "metric"), "'" + metric + "' is not latency or ttff");
  }
  m->slo_on_ttff = metric == "ttff";
  SLUICE_RETURN_IF_ERROR(r.Get(slo, at, "p99_s", &m->slo_p99_s));
  if (!(m->slo_p99_s > 0)) {
    return r.Error(Reader::Join(at, "p99_s"), "required, seconds > 0");
  }
  return Status::Ok();
}

}  // namespace

Result<ReportConfig> ReadReportConfig(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFoundError("report config " + path + ": no such file");
  }
  const Reader r(path);
  ReportConfig c;
  try {
    const YAML::Node root = YAML::LoadFile(path);
    SLUICE_RETURN_IF_ERROR(r.OnlyKeys(
        root, "", {"title", "hours", "seed", "series_interval_s", "gpu_memory_gb", "models"}));
    SLUICE_RETURN_IF_ERROR(r.Get(root, "", "title", &c.title));
    SLUICE_RETURN_IF_ERROR(r.Get(root, "", "hours", &c.hours));
    SLUICE_RETURN_IF_ERROR(r.Get(root, "", "seed", &c.seed));
    SLUICE_RETURN_IF_ERROR(r.Get(root, "", "series_interval_s", &c.series_interval_s));
    SLUICE_RETURN_IF_ERROR(r.Get(root, "", "gpu_memory_gb", &c.gpu_memory_gb));
    if (!(c.gpu_memory_gb > 0 && c.gpu_memory_gb <= 4096)) {
      return r.Error("gpu_memory_gb", "must be in (0, 4096]");
    }
    if (!(c.hours > 0 && c.hours <= 1000)) {
      return r.Error("hours", "must be in (0, 1000]");
    }
    if (!(c.series_interval_s >= 1)) {
      return r.Error("series_interval_s", "must be at least 1 (second)");
    }
    const YAML::Node models = root["models"];
    if (!models || !models.IsSequence() || models.size() == 0) {
      return r.Error("models", "required: a list of at least one model");
    }
    for (std::size_t i = 0; i < models.size(); ++i) {
      ReportModel m;
      SLUICE_RETURN_IF_ERROR(ReadModel(r, models[i], "models[" + std::to_string(i) + "]", &m));
      c.models.push_back(std::move(m));
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(path + ": " + e.what());
  }
  return c;
}

}  // namespace sluice::sim
