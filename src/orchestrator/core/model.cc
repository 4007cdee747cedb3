#include "orchestrator/core/model.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <set>

namespace sluice::orchestrator {
namespace {

bool AlnumLower(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}
bool Alnum(char c) {
  return AlnumLower(c) || (c >= 'A' && c <= 'Z');
}

}  // namespace

std::vector<StageDecl> StandardPipeline() {
  return {{"encode", StageKind::kWork},
          {"denoise", StageKind::kAdmission},
          {"decode", StageKind::kWork}};
}

PipelineRoles RolesOf(const std::vector<StageDecl>& stages) {
  PipelineRoles r;
  const auto loop = std::find_if(stages.begin(), stages.end(), [](const StageDecl& d) {
    return d.kind == StageKind::kAdmission;
  });
  if (loop == stages.end()) {
    return r;
  }
  r.loop = loop->name;
  if (loop != stages.begin()) {
    r.condition = std::prev(loop)->name;
  }
  if (std::next(loop) != stages.end()) {
    r.output = stages.back().name;
  }
  return r;
}

const PipelineRoles& StandardRoles() {
  static const PipelineRoles roles = RolesOf(StandardPipeline());
  return roles;
}

int ProgressWeight(const StageDecl& d) {
  if (d.progress_weight > 0) {
    return d.progress_weight;
  }
  return d.kind == StageKind::kAdmission ? kAdmissionWeight : kWorkWeight;
}

double PipelineProgress(const std::vector<StageDecl>& stages, std::string_view stage, int step,
                        int steps) {
  double total = 0, before = 0, within = 0;
  bool found = false;
  for (const StageDecl& d : stages) {
    if (d.name == stage) {
      found = true;
      if (d.kind == StageKind::kAdmission && steps > 0) {
        within = ProgressWeight(d) * std::clamp(static_cast<double>(step) / steps, 0.0, 1.0);
      }
    } else if (!found) {
      before += ProgressWeight(d);
    }
    total += ProgressWeight(d);
  }
  return found && total > 0 ? (before + within) / total : 0.0;
}

Status ValidateStageName(std::string_view s) {
  bool ok = !s.empty() && s.size() <= kMaxNameLength && AlnumLower(s[0]);
  for (char c : s) {
    ok = ok && (AlnumLower(c) || c == '_' || c == '-');
  }
  if (!ok) {
    return InvalidArgumentError("stage name '" + std::string(s.substr(0, kMaxNameLength)) +
                                "': 1..64 of a-z, 0-9, '_', '-', starting with a letter or digit");
  }
  return Status::Ok();
}

Result<std::pair<int, int>> ParseSize(std::string_view size) {
  int w = 0, h = 0;
  const auto x = size.find('x');
  const char* end = size.data() + size.size();
  const auto p1 = std::from_chars(size.data(), size.data() + (x == size.npos ? 0 : x), w);
  const auto p2 = x == size.npos ? std::from_chars_result{nullptr, std::errc::invalid_argument}
                                 : std::from_chars(size.data() + x + 1, end, h);
  if (x == size.npos || p1.ec != std::errc() || p1.ptr != size.data() + x || p2.ec != std::errc() ||
      p2.ptr != end || w < 64 || h < 64 || w > 2048 || h > 2048 || w % 8 != 0 || h % 8 != 0) {
    return InvalidArgumentError("WIDTHxHEIGHT, each 64..2048 and a multiple of 8");
  }
  return std::pair<int, int>{w, h};
}

Status ValidateDeclaredSizes(std::string_view image_size, std::string_view video_size) {
  if (!image_size.empty()) {
    SLUICE_RETURN_IF_ERROR(ParseSize(image_size).status().WithContext("image_size"));
  }
  if (!video_size.empty()) {
    SLUICE_RETURN_IF_ERROR(ParseSize(video_size).status().WithContext("video_size"));
  }
  return Status::Ok();
}

bool IsTimingName(std::string_view name) {
  return !name.empty() && name.size() <= 32 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || c == '_';
  });
}

Status ValidateModelName(std::string_view m) {
  bool ok = !m.empty() && m.size() <= kMaxNameLength && Alnum(m[0]);
  for (char c : m) {
    ok = ok && (Alnum(c) || c == '.' || c == '_' || c == ':' || c == '/' || c == '-');
  }
  if (!ok) {
    return InvalidArgumentError("model name '" + std::string(m.substr(0, kMaxNameLength)) +
                                "': 1..64 of A-Z, a-z, 0-9, '.', '_', ':', '/', '-', starting "
                                "with a letter or digit");
  }
  return Status::Ok();
}

Status ValidateModel(const ModelSpec& m) {
  SLUICE_RETURN_IF_ERROR(ValidateModelName(m.name));
  if (m.stages.empty() || m.stages.size() > kMaxStages) {
    return InvalidArgumentError("model '" + m.name + "': a pipeline has 1.." +
                                std::to_string(kMaxStages) + " stages, not " +
                                std::to_string(m.stages.size()));
  }
  std::set<std::string_view> seen;
  for (const StageDecl& s : m.stages) {
    SLUICE_RETURN_IF_ERROR(ValidateStageName(s.name));
    if (!seen.insert(s.name).second) {
      return InvalidArgumentError("model '" + m.name + "': stage '" + s.name + "' appears twice");
    }
    if (s.progress_weight < 0 || s.progress_weight > kMaxProgressWeight) {
      return InvalidArgumentError("model '" + m.name + "': stage '" + s.name +
                                  "': progress weight " + std::to_string(s.progress_weight) +
                                  " is not in 0.." + std::to_string(kMaxProgressWeight));
    }
  }
  return Status::Ok();
}

std::string FormatPipeline(const std::vector<StageDecl>& stages) {
  std::string out;
  for (const StageDecl& s : stages) {
    out +=
        (out.empty() ? "" : ",") + s.name + (s.kind == StageKind::kAdmission ? ":admission" : "");
    if (s.progress_weight != 0) {
      out += "@" + std::to_string(s.progress_weight);
    }
  }
  return out;
}

Result<std::vector<StageDecl>> ParsePipeline(std::string_view text) {
  std::vector<StageDecl> out;
  for (;;) {
    const std::size_t comma = text.find(',');
    std::string_view entry = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    StageDecl d;
    const std::size_t at = entry.find('@');
    if (at != std::string_view::npos) {
      const std::string_view w = entry.substr(at + 1);
      int weight = 0;
      const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), weight);
      if (w.empty() || ec != std::errc() || end != w.data() + w.size() || weight < 1 ||
          weight > kMaxProgressWeight) {
        return InvalidArgumentError("pipeline entry '" + std::string(entry) +
                                    "': the progress weight after '@' is 1.." +
                                    std::to_string(kMaxProgressWeight));
      }
      d.progress_weight = weight;
      entry = entry.substr(0, at);
    }
    const std::size_t colon = entry.find(':');
    d.name = std::string(entry.substr(0, colon));
    if (colon != std::string_view::npos) {
      const std::string_view kind = entry.substr(colon + 1);
      if (kind == "admission") {
        d.kind = StageKind::kAdmission;
      } else if (kind != "work") {
        return InvalidArgumentError("pipeline entry '" + std::string(entry) +
                                    "': the kind after ':' is work or admission");
      }
    }
    SLUICE_RETURN_IF_ERROR(ValidateStageName(d.name));
    out.push_back(std::move(d));
    if (comma == std::string_view::npos) {
      return out;
    }
  }
}

}  // namespace sluice::orchestrator
