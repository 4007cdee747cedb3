// Validation of generation request bodies (images and videos).
#include <charconv>
#include <set>
#include <utility>
#include <vector>

#include "sluice/adapters.h"

#include "http/json_body.h"
#include "orchestrator/service/http_api.h"

namespace sluice::orchestrator {

using nlohmann::json;

std::uint64_t SeedBits(const json& j) {
  if (!j.contains("seed")) {
    return 0;
  }
  return j["seed"].is_number_unsigned() ? j["seed"].get<std::uint64_t>()
                                        : static_cast<std::uint64_t>(j["seed"].get<std::int64_t>());
}

Result<JobRequest> ParseGenerationRequest(std::string_view body, std::string_view kind,
                                          const HttpOptions& o, bool* async,
                                          const ModelSizeFn& model_size) {
  // An edit (an image from a picture) and a video from a reference picture
  // may carry a strength; the caller adds the picture.
  const bool edit = kind == "edit" || kind == "video_reference";
  const bool video = kind == "video" || kind == "video_reference";
  const RequestLimits& limits = o.limits;
  SLUICE_ASSIGN_OR_RETURN(json j, http::ParseJsonBody(body, o.max_json_depth));
  if (!j.is_object()) {
    return InvalidArgumentError("body: not a JSON object");
  }
  auto bad = [](const char* field, const std::string& why) {
    return InvalidArgumentError(std::string(field) + ": " + why);
  };
  // OpenAI's fields, then sluice's own (all optional but the prompt).
  static const std::set<std::string> kImage = {"prompt",
                                               "n",
                                               "size",
                                               "quality",
                                               "style",
                                               "response_format",
                                               "output_format",
                                               "background",
                                               "user",
                                               "model",
                                               "negative_prompt",
                                               "seed",
                                               "steps",
                                               "async",
                                               "priority",
                                               "deadline_ms",
                                               "guidance",
                                               "keep_checkpoints",
                                               "resume_from",
                                               "preview_every",
                                               "step_cache",
                                               "lora"};
  static const std::set<std::string> kVideo = {"prompt",      "size",
                                               "seconds",     "frames",
                                               "fps",         "negative_prompt",
                                               "seed",        "steps",
                                               "model",       "priority",
                                               "deadline_ms", "user",
                                               "guidance",    "keep_checkpoints",
                                               "resume_from", "preview_every",
                                               "step_cache",  "lora"};
  for (const auto& [k, v] : j.items()) {
    if ((video ? kVideo : kImage).count(k) == 0 && !(edit && k == "strength")) {
      return bad(k.c_str(), "unknown field");
    }
  }
  if (j.contains("strength") &&
      (!j["strength"].is_number() || !(j["strength"] > 0) || j["strength"] > 1)) {
    return bad("strength", "a number in (0, 1]: how much of the picture is redrawn");
  }
  if (video) {
    // OpenAI sends seconds as a string ("4"); numbers are accepted too.
    if (j.contains("seconds")) {
      int secs = 0;
      if (j["seconds"].is_string()) {
        const std::string t = j["seconds"];
        auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), secs);
        if (ec != std::errc() || end != t.data() + t.size()) {
          secs = 0;
        }
      } else if (j["seconds"].is_number_integer()) {
        secs = j["seconds"].get<int>();
      }
      if (secs < 1 || secs > 60) {
        return bad("seconds", "1..60");
      }
      j["seconds"] = secs;
    }
    const std::string frame_range = "an integer in 1.." + std::to_string(limits.max_frames);
    if (j.contains("frames") &&
        (!j["frames"].is_number_integer() || j["frames"] < 1 || j["frames"] > limits.max_frames)) {
      return bad("frames", frame_range);
    }
    if (j.contains("fps") && (!j["fps"].is_number_integer() || j["fps"] < 1 || j["fps"] > 60)) {
      return bad("fps", "an integer in 1..60");
    }
    j["fps"] = j.value("fps", 16);
    if (!j.contains("frames")) {
      // Frames from seconds: seconds x fps + 1 (the first frame is t = 0).
      const int frames = j.value("seconds", 1) * j["fps"].get<int>() + 1;
      if (frames > limits.max_frames) {
        return bad("seconds", "seconds x fps + 1 = " + std::to_string(frames) +
                                  " frames; at most " + std::to_string(limits.max_frames));
      }
      j["frames"] = frames;
    }
  }
  if (!j.contains("prompt") || !j["prompt"].is_string() || j["prompt"].get<std::string>().empty() ||
      j["prompt"].get<std::string>().size() > 10000) {
    return bad("prompt", "required, a string of 1..10000 characters");
  }
  if (j.contains("n") &&
      (!j["n"].is_number_integer() || j["n"] < 1 || j["n"] > limits.max_images)) {
    return bad("n", "an integer in 1.." + std::to_string(limits.max_images));
  }
  // Without a size: the model's own (what its workers declare it was
  // trained at), else the front's.
  std::string default_size;
  if (model_size) {
    const json& m = j.contains("model") ? j["model"] : json("");
    default_size = m.is_string() ? model_size(m.get<std::string>()) : std::string();
  }
  if (default_size.empty()) {
    default_size = video ? "320x192" : "256x256";
  }
  std::string size = j.value("size", json(default_size)).is_string() ? j.value("size", default_size)
                                                                     : std::string();
  if (size.empty()) {
    return bad("size", "a string like \"256x256\"");
  }
  const Result<std::pair<int, int>> wh = ParseSize(size);
  if (!wh.ok()) {
    return bad("size", std::string(wh.status().message()));
  }
  const auto [w, h] = *wh;
  if (j.contains("response_format") && j["response_format"] != "b64_json" &&
      j["response_format"] != "url") {
    return bad("response_format", "\"b64_json\" or \"url\"");
  }
  // Hints OpenAI documents that sluice accepts and ignores (README).
  static const std::vector<std::pair<const char*, std::set<std::string>>> kHints = {
      {"quality", {"auto", "standard", "hd", "low", "medium", "high"}},
      {"style", {"vivid", "natural"}},
      {"background", {"auto", "opaque", "transparent"}}};
  for (const auto& [field, allowed] : kHints) {
    if (j.contains(field) &&
        (!j[field].is_string() || allowed.count(j[field].get<std::string>()) == 0)) {
      std::string list;
      for (const std::string& a : allowed) {
        list += (list.empty() ? "" : ", ") + a;
      }
      return bad(field, "one of " + list);
    }
  }
  if (j.contains("output_format")) {
    if (!j["output_format"].is_string()) {
      return bad("output_format", "a string: png");
    }
    const std::string f = j["output_format"];
    if (f == "jpeg" || f == "webp") {
      return bad("output_format", f + " is not served (no " + f + " encoder linked); png is");
    }
    if (f != "png") {
      return bad("output_format", "png (jpeg and webp are not served)");
    }
  }
  if (j.contains("user") && (!j["user"].is_string() || j["user"].get<std::string>().size() > 256)) {
    return bad("user", "a string of at most 256 characters");
  }
  if (j.contains("negative_prompt") && !j["negative_prompt"].is_string()) {
    return bad("negative_prompt", "a string");
  }
  // Seeds are 64 bits end to end: any integer from -2^63 to 2^64-1, kept
  // as its 64-bit pattern.
  if (j.contains("seed") && !j["seed"].is_number_integer()) {
    return bad("seed", "a 64-bit integer");
  }
  if (j.contains("steps") &&
      (!j["steps"].is_number_integer() || j["steps"] < 1 || j["steps"] > limits.max_steps)) {
    return bad("steps", "an integer in 1.." + std::to_string(limits.max_steps));
  }
  if (j.contains("guidance") &&
      (!j["guidance"].is_number() || j["guidance"] < 0 || j["guidance"] > 30)) {
    return bad("guidance", "a number in 0..30");
  }
  {
    const std::uint64_t frames = video ? j["frames"].get<std::uint64_t>() : 1;
    const std::uint64_t cost =
        static_cast<std::uint64_t>(w) * static_cast<std::uint64_t>(h) * frames;
    if (cost > limits.max_pixel_frames) {
      return bad("size", std::string(video ? "width x height x frames = " : "width x height = ") +
                             std::to_string(cost) + "; at most " +
                             std::to_string(limits.max_pixel_frames));
    }
  }
  // Previews every k steps: at most one per heartbeat reaches the server,
  // and a job keeps only its newest.
  if (j.contains("preview_every") &&
      (!j["preview_every"].is_number_integer() || j["preview_every"] < 0 ||
       j["preview_every"] > limits.max_steps)) {
    return bad("preview_every", "an integer in 0.." + std::to_string(limits.max_steps));
  }
  // Step caching (opt-in): the denoiser skips its blocks on a step whose
  // input moved less than the threshold; 0 turns a deployment's default off.
  if (j.contains("step_cache")) {
    const json& c = j["step_cache"];
    if (!c.is_object() || c.size() != 1 || !c.contains("threshold") ||
        !c["threshold"].is_number() || c["threshold"] < 0 || c["threshold"] > 1) {
      return bad("step_cache", "{\"threshold\": a number in 0..1} (0: off)");
    }
  }
  // LoRA adapters by name (the caller resolves the names: 404 for an
  // unknown one) and scale.
  if (j.contains("lora")) {
    const json& l = j["lora"];
    if (!l.is_array() || l.size() > static_cast<std::size_t>(kMaxAdaptersPerRequest)) {
      return bad("lora", "a list of at most " + std::to_string(kMaxAdaptersPerRequest) +
                             " {\"name\": an adapter, \"scale\": a number} objects");
    }
    for (std::size_t i = 0; i < l.size(); ++i) {
      const std::string at = "lora[" + std::to_string(i) + "]";
      const json& e = l[i];
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string() ||
          !ValidAdapterName(e["name"].get<std::string>())) {
        return bad((at + ".name").c_str(), "required, an adapter's name (GET /v1/adapters)");
      }
      for (const auto& [k, v] : e.items()) {
        if (k != "name" && k != "scale") {
          return bad((at + "." + k).c_str(), "unknown field (name and scale are)");
        }
      }
      if (e.contains("scale") && (!e["scale"].is_number() || !(e["scale"] >= -kMaxAdapterScale) ||
                                  !(e["scale"] <= kMaxAdapterScale))) {
        return bad((at + ".scale").c_str(), "a number in -4..4 (1: as trained)");
      }
    }
  }
  if (j.contains("async") && !j["async"].is_boolean()) {
    return bad("async", "true or false");
  }
  if (j.contains("keep_checkpoints") && !j["keep_checkpoints"].is_boolean()) {
    return bad("keep_checkpoints", "true or false");
  }
  std::optional<ResumeFrom> resume;
  if (j.contains("resume_from")) {
    const json& f = j["resume_from"];
    const bool job = f.is_object() && f.contains("job") && f["job"].is_string() &&
                     !f["job"].get<std::string>().empty() &&
                     f["job"].get<std::string>().size() <= 256;
    const bool step = f.is_object() && f.contains("step") && f["step"].is_number_integer() &&
                      f["step"] >= 1 && f["step"] <= limits.max_steps;
    if (!job || !step || f.size() != 2) {
      return bad("resume_from", "{\"job\": a job id, \"step\": an integer in 1.." +
                                    std::to_string(limits.max_steps) + "}");
    }
    resume = ResumeFrom{f["job"].get<std::string>(), f["step"].get<int>()};
  }
  JobRequest r;
  r.keep_checkpoints = j.value("keep_checkpoints", false);
  r.resume_from = std::move(resume);
  r.kind = video ? "video" : "image";
  if (j.contains("model")) {
    if (!j["model"].is_string()) {
      return bad("model", "a model id (GET /v1/models lists them)");
    }
    r.model = j["model"].get<std::string>();
    if (Status s = ValidateModelName(r.model); !s.ok()) {
      return bad("model", std::string(s.message()));
    }
  }
  const std::string prio = j.value("priority", json("standard")).is_string()
                               ? j.value("priority", std::string("standard"))
                               : std::string("?");
  const std::optional<PriorityClass> priority = ParsePriority(prio);
  if (!priority) {
    return bad("priority", "interactive, standard or batch");
  }
  r.priority = *priority;
  if (j.contains("deadline_ms")) {
    if (!j["deadline_ms"].is_number_integer() || j["deadline_ms"] < 1 ||
        j["deadline_ms"] > 86400000) {
      return bad("deadline_ms", "an integer in 1..86400000");
    }
    r.deadline = std::chrono::milliseconds(j["deadline_ms"].get<std::int64_t>());
  }
  *async = j.value("async", false);
  j["size"] = size;
  j["seed"] = SeedBits(j);
  j.erase("async");
  j.erase("resume_from");       // Submission resolves it (resume_checkpoint).
  j.erase("keep_checkpoints");  // Submission writes it back with its retention.
  // What a denoise batch needs its members to share: the latent's shape
  // and the step schedule (the model is the pool's).
  r.batch_key = "size=" + size + ",frames=" + std::to_string(j.value("frames", 1)) +
                ",steps=" + std::to_string(j.value("steps", 0));
  r.request_json = j.dump();
  return r;
}

}  // namespace sluice::orchestrator
