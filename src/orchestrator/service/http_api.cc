#include "orchestrator/service/http_api.h"

#include <openssl/evp.h>

#include <charconv>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "media/frames_archive.h"
#include "orchestrator/service/video_mux.h"

namespace sluice::orchestrator {
namespace {

using nlohmann::json;

std::string Base64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

void Error(httplib::Response& res, int http, std::string_view type, std::string_view message,
           std::string_view param = {}) {
  json j;
  j["error"] = {{"message", message}, {"type", type}};
  if (!param.empty()) {
    j["error"]["param"] = param;
  }
  res.status = http;
  res.set_content(j.dump(), "application/json");
}

void StatusError(httplib::Response& res, const Status& s) {
  const bool full = s.code() == StatusCode::kResourceExhausted;
  if (full) {
    res.set_header("Retry-After", "1");
  }
  Error(res,
        full                                       ? 429
        : s.code() == StatusCode::kInvalidArgument ? 400
        : s.code() == StatusCode::kNotFound        ? 404
                                                   : 503,
        full ? "rate_limit_exceeded" : "invalid_request_error", s.message());
}

json JobJson(const JobView& v) {
  json j;
  j["id"] = "job-" + std::to_string(v.id);
  j["object"] = "job";
  j["kind"] = v.kind;
  j["status"] = v.status;
  j["stage"] = v.stage;
  j["progress"] = {{"step", v.step}, {"steps", v.steps}};
  if (!v.error.empty()) {
    j["error"] = v.error;
  }
  if (v.ttff_ms >= 0) {
    j["ttff_ms"] = v.ttff_ms;
  }
  return j;
}

json EventJson(const JobEvent& e) {
  json j = {{"type", e.type}, {"t_ms", e.t_ms}, {"stage", e.stage}};
  if (e.type == "step") {
    j["step"] = e.step;
    j["steps"] = e.steps;
  }
  if (!e.detail.empty()) {
    j["detail"] = e.detail;
  }
  return j;
}

// OpenAI's video object.
json VideoJson(const JobView& v) {
  static const std::map<std::string, std::string> kStatus = {{"queued", "queued"},
                                                             {"running", "in_progress"},
                                                             {"succeeded", "completed"},
                                                             {"failed", "failed"},
                                                             {"cancelled", "cancelled"}};
  int progress = 0;
  if (v.status == "succeeded") {
    progress = 100;
  } else if (v.stage == "denoise") {
    progress = 10 + (v.steps > 0 ? 80 * v.step / v.steps : 0);
  } else if (v.stage == "decode") {
    progress = 90;
  }
  json j = {{"id", "job-" + std::to_string(v.id)},
            {"object", "video"},
            {"status", kStatus.at(v.status)},
            {"progress", progress},
            {"created_at", v.created_unix_s}};
  if (!v.error.empty()) {
    j["error"] = {{"message", v.error}};
  }
  return j;
}

// "job-42" -> 42.
std::optional<JobId> ParseJobId(const std::string& s) {
  std::string_view v = s;
  if (v.starts_with("job-")) {
    v.remove_prefix(4);
  }
  JobId id = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), id);
  if (ec != std::errc() || end != v.data() + v.size() || id == 0) {
    return std::nullopt;
  }
  return id;
}

}  // namespace

Result<JobRequest> ParseImageRequest(std::string_view body, bool* async) {
  return ParseGenerationRequest(body, "image", async);
}

Result<JobRequest> ParseGenerationRequest(std::string_view body, std::string_view kind,
                                          bool* async) {
  const bool video = kind == "video";
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError("body: not a JSON object");
  }
  auto bad = [](const char* field, const std::string& why) {
    return InvalidArgumentError(std::string(field) + ": " + why);
  };
  static const std::set<std::string> kImage = {
      "prompt",      "n",     "size",    "response_format", "negative_prompt",
      "seed",        "steps", "model",   "async",           "priority",
      "deadline_ms", "user",  "guidance"};
  static const std::set<std::string> kVideo = {
      "prompt", "size",  "seconds",  "frames",      "fps",  "negative_prompt", "seed",
      "steps",  "model", "priority", "deadline_ms", "user", "guidance"};
  for (const auto& [k, v] : j.items()) {
    if ((video ? kVideo : kImage).count(k) == 0) {
      return bad(k.c_str(), "unknown field");
    }
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
    if (j.contains("frames") &&
        (!j["frames"].is_number_integer() || j["frames"] < 1 || j["frames"] > 1024)) {
      return bad("frames", "an integer in 1..1024");
    }
    if (j.contains("fps") && (!j["fps"].is_number_integer() || j["fps"] < 1 || j["fps"] > 60)) {
      return bad("fps", "an integer in 1..60");
    }
    j["fps"] = j.value("fps", 16);
    if (!j.contains("frames")) {
      j["frames"] = j.value("seconds", 1) * j["fps"].get<int>() + 1;
    }
  }
  if (!j.contains("prompt") || !j["prompt"].is_string() || j["prompt"].get<std::string>().empty() ||
      j["prompt"].get<std::string>().size() > 10000) {
    return bad("prompt", "required, a string of 1..10000 characters");
  }
  if (j.contains("n") && (!j["n"].is_number_integer() || j["n"] < 1 || j["n"] > 4)) {
    return bad("n", "an integer in 1..4");
  }
  const std::string default_size = video ? "320x192" : "256x256";
  std::string size = j.value("size", json(default_size)).is_string() ? j.value("size", default_size)
                                                                     : std::string();
  if (size.empty()) {
    return bad("size", "a string like \"256x256\"");
  }
  int w = 0, h = 0;
  {
    const auto x = size.find('x');
    auto p1 = std::from_chars(size.data(), size.data() + (x == std::string::npos ? 0 : x), w);
    auto p2 = x == std::string::npos
                  ? std::from_chars_result{nullptr, std::errc::invalid_argument}
                  : std::from_chars(size.data() + x + 1, size.data() + size.size(), h);
    if (x == std::string::npos || p1.ec != std::errc() || p2.ec != std::errc() ||
        p2.ptr != size.data() + size.size() || w < 64 || h < 64 || w > 2048 || h > 2048 ||
        w % 8 != 0 || h % 8 != 0) {
      return bad("size", "WIDTHxHEIGHT, each 64..2048 and a multiple of 8");
    }
  }
  if (j.contains("response_format") && j["response_format"] != "b64_json" &&
      j["response_format"] != "url") {
    return bad("response_format", "\"b64_json\" or \"url\"");
  }
  if (j.contains("negative_prompt") && !j["negative_prompt"].is_string()) {
    return bad("negative_prompt", "a string");
  }
  if (j.contains("seed") && !j["seed"].is_number_integer()) {
    return bad("seed", "an integer");
  }
  if (j.contains("steps") &&
      (!j["steps"].is_number_integer() || j["steps"] < 1 || j["steps"] > 1000)) {
    return bad("steps", "an integer in 1..1000");
  }
  if (j.contains("async") && !j["async"].is_boolean()) {
    return bad("async", "true or false");
  }
  JobRequest r;
  r.kind = std::string(kind);
  const std::string prio = j.value("priority", json("standard")).is_string()
                               ? j.value("priority", std::string("standard"))
                               : std::string("?");
  if (prio == "interactive") {
    r.priority = PriorityClass::kInteractive;
  } else if (prio == "standard") {
    r.priority = PriorityClass::kStandard;
  } else if (prio == "batch") {
    r.priority = PriorityClass::kBatch;
  } else {
    return bad("priority", "interactive, standard or batch");
  }
  if (j.contains("deadline_ms")) {
    if (!j["deadline_ms"].is_number_integer() || j["deadline_ms"] < 1 ||
        j["deadline_ms"] > 86400000) {
      return bad("deadline_ms", "an integer in 1..86400000");
    }
    r.deadline = std::chrono::milliseconds(j["deadline_ms"].get<std::int64_t>());
  }
  *async = j.value("async", false);
  j["size"] = size;
  j["seed"] = j.value("seed", 0);
  j.erase("async");
  r.request_json = j.dump();
  return r;
}

void InstallHttpApi(httplib::Server& http, OrchestratorState& state, HttpOptions options) {
  const auto sync_timeout = options.sync_timeout;
  // MP4s made from frames archives, newest last (a few, for repeated GETs).
  struct Mp4Cache {
    std::mutex mu;
    std::deque<std::pair<JobId, std::string>> items;
  };
  auto cache = std::make_shared<Mp4Cache>();
  const std::string ffmpeg = options.ffmpeg;
  http.Post("/v1/images/generations",
            [&state, sync_timeout](const httplib::Request& req, httplib::Response& res) {
              bool async = false;
              Result<JobRequest> r = ParseImageRequest(req.body, &async);
              if (!r.ok()) {
                const std::string msg(r.status().message());
                return Error(res, 400, "invalid_request_error", msg, msg.substr(0, msg.find(':')));
              }
              // One job per image (seed + i), all or none accepted.
              const json body = json::parse(r->request_json);
              const int n = body.value("n", 1);
              std::vector<JobId> ids;
              for (int i = 0; i < n; ++i) {
                JobRequest one = *r;
                json b = body;
                b["n"] = 1;
                b["index"] = i;
                b["seed"] = body.value("seed", 0) + i;
                one.request_json = b.dump();
                Result<JobId> id = state.Submit(one);
                if (!id.ok()) {
                  for (JobId done : ids) {
                    (void)state.Cancel(done);
                  }
                  return StatusError(res, id.status());
                }
                ids.push_back(*id);
              }
              if (async) {
                res.status = 202;
                if (n == 1) {
                  res.set_content(JobJson(*state.Get(ids[0])).dump(), "application/json");
                } else {
                  json list = {{"object", "list"}, {"data", json::array()}};
                  for (JobId id : ids) {
                    list["data"].push_back(JobJson(*state.Get(id)));
                  }
                  res.set_content(list.dump(), "application/json");
                }
                return;
              }
              // "url": the job's content, served while the orchestrator
              // keeps the job (the newest max_finished_jobs).
              const bool url = body.value("response_format", "b64_json") == "url";
              const std::string host = req.get_header_value("Host");
              const std::string base = host.empty() ? "" : "http://" + host;
              json out;
              out["data"] = json::array();
              for (JobId id : ids) {
                std::optional<JobView> v = state.WaitFinished(id, sync_timeout);
                if (!v.has_value() || !v->finished()) {
                  return Error(res, 504, "timeout", "job-" + std::to_string(id) + " still running");
                }
                if (v->status != "succeeded") {
                  return Error(res, 500, "job_failed", v->status + ": " + v->error);
                }
                out["data"].push_back(
                    url ? json{{"url", base + "/v1/jobs/job-" + std::to_string(id) + "/content"}}
                        : json{{"b64_json", Base64(v->result)}});
              }
              out["created"] = std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
              out["id"] = "job-" + std::to_string(ids[0]);
              res.set_content(out.dump(), "application/json");
            });

  http.Post("/v1/videos", [&state](const httplib::Request& req, httplib::Response& res) {
    bool async = true;
    Result<JobRequest> r = ParseGenerationRequest(req.body, "video", &async);
    if (!r.ok()) {
      const std::string msg(r.status().message());
      return Error(res, 400, "invalid_request_error", msg, msg.substr(0, msg.find(':')));
    }
    Result<JobId> id = state.Submit(*r);
    if (!id.ok()) {
      return StatusError(res, id.status());
    }
    res.set_content(VideoJson(*state.Get(*id)).dump(), "application/json");
  });
  http.Get(R"(/v1/videos/([^/]+))", [&state](const httplib::Request& req, httplib::Response& res) {
    std::optional<JobId> id = ParseJobId(req.matches[1]);
    std::optional<JobView> v = id ? state.Get(*id) : std::nullopt;
    if (!v.has_value() || v->kind != "video") {
      return Error(res, 404, "not_found", "no video " + std::string(req.matches[1]));
    }
    res.set_content(VideoJson(*v).dump(), "application/json");
  });
  http.Get(R"(/v1/videos/([^/]+)/content)",
           [&state, ffmpeg, cache](const httplib::Request& req, httplib::Response& res) {
             std::optional<JobId> id = ParseJobId(req.matches[1]);
             std::optional<JobView> v = id ? state.Get(*id) : std::nullopt;
             if (!v.has_value() || v->kind != "video") {
               return Error(res, 404, "not_found", "no video " + std::string(req.matches[1]));
             }
             if (v->status != "succeeded") {
               return Error(res, 409, "video_not_ready", "video is " + v->status);
             }
             if (v->result_type != media::kFramesArchiveType) {
               res.set_content(v->result, v->result_type.empty() ? "application/octet-stream"
                                                                 : v->result_type.c_str());
               return;
             }
             if (ffmpeg.empty()) {
               res.set_content(v->result, "application/x-tar");  // The frames themselves.
               return;
             }
             {
               std::lock_guard<std::mutex> lock(cache->mu);
               for (const auto& [id, mp4] : cache->items) {
                 if (id == v->id) {
                   res.set_content(mp4, "video/mp4");
                   return;
                 }
               }
             }
             const json request = json::parse(v->request_json, nullptr, false);
             const int fps = request.is_object() ? request.value("fps", 16) : 16;
             Result<std::string> mp4 = FramesToMp4(v->result, fps, ffmpeg);
             if (!mp4.ok()) {
               return Error(res, 500, "encode_failed", mp4.status().message());
             }
             res.set_content(*mp4, "video/mp4");
             std::lock_guard<std::mutex> lock(cache->mu);
             cache->items.emplace_back(v->id, std::move(*mp4));
             if (cache->items.size() > 8) {
               cache->items.pop_front();
             }
           });

  http.Get(R"(/v1/jobs/([^/]+))", [&state](const httplib::Request& req, httplib::Response& res) {
    std::optional<JobId> id = ParseJobId(req.matches[1]);
    std::optional<JobView> v = id ? state.Get(*id) : std::nullopt;
    if (!v.has_value()) {
      return Error(res, 404, "not_found", "no job " + std::string(req.matches[1]));
    }
    res.set_content(JobJson(*v).dump(), "application/json");
  });

  // Any finished job's result bytes (a PNG image, a frames archive), as the
  // final stage returned them.
  http.Get(R"(/v1/jobs/([^/]+)/content)",
           [&state](const httplib::Request& req, httplib::Response& res) {
             std::optional<JobId> id = ParseJobId(req.matches[1]);
             std::optional<JobView> v = id ? state.Get(*id) : std::nullopt;
             if (!v.has_value()) {
               return Error(res, 404, "not_found", "no job " + std::string(req.matches[1]));
             }
             if (v->status != "succeeded") {
               return Error(res, 409, "job_not_ready", "job is " + v->status);
             }
             res.set_content(v->result, v->result_type.empty() ? "application/octet-stream"
                                                               : v->result_type.c_str());
           });

  http.Delete(R"(/v1/jobs/([^/]+))", [&state](const httplib::Request& req, httplib::Response& res) {
    std::optional<JobId> id = ParseJobId(req.matches[1]);
    Status s = id ? state.Cancel(*id) : NotFoundError("no job " + std::string(req.matches[1]));
    if (!s.ok()) {
      return StatusError(res, s);
    }
    res.set_content(JobJson(*state.Get(*id)).dump(), "application/json");
  });

  http.Get(R"(/v1/jobs/([^/]+)/events)", [&state](const httplib::Request& req,
                                                  httplib::Response& res) {
    std::optional<JobId> id = ParseJobId(req.matches[1]);
    if (!id || !state.Get(*id)) {
      return Error(res, 404, "not_found", "no job " + std::string(req.matches[1]));
    }
    auto next = std::make_shared<std::size_t>(0);
    res.set_chunked_content_provider(
        "text/event-stream", [&state, id = *id, next](std::size_t, httplib::DataSink& sink) {
          auto [events, finished] = state.EventsFrom(id, *next, std::chrono::seconds(1));
          for (const JobEvent& e : events) {
            const std::string line = "event: " + e.type + "\ndata: " + EventJson(e).dump() + "\n\n";
            if (!sink.write(line.data(), line.size())) {
              return false;
            }
          }
          *next += events.size();
          if (finished) {
            sink.done();
          }
          return true;
        });
  });

  http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });

  http.Get("/metrics", [&state](const httplib::Request&, httplib::Response& res) {
    const ServiceStats s = state.Stats();
    std::ostringstream out;
    out << "# HELP sluice_orchestrator_queued Queued stage work.\n"
        << "# TYPE sluice_orchestrator_queued gauge\n";
    for (int st = 0; st < kStageCount; ++st) {
      out << "sluice_orchestrator_queued{stage=\"" << StageName(static_cast<Stage>(st)) << "\"} "
          << s.scheduler.queued[st] << "\n";
    }
    out << "# HELP sluice_orchestrator_workers Registered workers.\n"
        << "# TYPE sluice_orchestrator_workers gauge\n";
    for (int st = 0; st < kStageCount; ++st) {
      out << "sluice_orchestrator_workers{stage=\"" << StageName(static_cast<Stage>(st)) << "\"} "
          << s.workers[st] << "\n";
    }
    auto counter = [&](const char* name, const char* help, std::uint64_t v) {
      out << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n"
          << name << " " << v << "\n";
    };
    static constexpr const char* kClasses[kClassCount] = {"interactive", "standard", "batch"};
    out << "# HELP sluice_orchestrator_queued_by_class Queued stage work per priority class.\n"
        << "# TYPE sluice_orchestrator_queued_by_class gauge\n";
    for (int st = 0; st < kStageCount; ++st) {
      for (int c = 0; c < kClassCount; ++c) {
        out << "sluice_orchestrator_queued_by_class{stage=\"" << StageName(static_cast<Stage>(st))
            << "\",class=\"" << kClasses[c] << "\"} " << s.scheduler.queued_by_class[st][c] << "\n";
      }
    }
    out << "# HELP sluice_orchestrator_free_slots Credits advertised by workers, unassigned.\n"
        << "# TYPE sluice_orchestrator_free_slots gauge\n";
    for (int st = 0; st < kStageCount; ++st) {
      out << "sluice_orchestrator_free_slots{stage=\"" << StageName(static_cast<Stage>(st))
          << "\"} " << s.scheduler.free_slots[st] << "\n";
    }
    auto hist = [&](const char* name, const char* help, const Histogram& h,
                    const std::string& labels) {
      const std::string sep = labels.empty() ? "" : ",";
      for (std::size_t b = 0; b < Histogram::kBuckets.size(); ++b) {
        out << name << "_bucket{" << labels << sep << "le=\"" << Histogram::kBuckets[b] << "\"} "
            << h.counts[b] << "\n";
      }
      out << name << "_bucket{" << labels << sep << "le=\"+Inf\"} " << h.count << "\n"
          << name << "_sum" << (labels.empty() ? "" : "{" + labels + "}") << " " << h.sum << "\n"
          << name << "_count" << (labels.empty() ? "" : "{" + labels + "}") << " " << h.count
          << "\n";
      (void)help;
    };
    out << "# HELP sluice_orchestrator_job_seconds Submission to success.\n"
        << "# TYPE sluice_orchestrator_job_seconds histogram\n";
    hist("sluice_orchestrator_job_seconds", "", s.job_latency, "");
    out << "# HELP sluice_orchestrator_ttff_seconds Submission to the first decoded frame.\n"
        << "# TYPE sluice_orchestrator_ttff_seconds histogram\n";
    hist("sluice_orchestrator_ttff_seconds", "", s.ttff, "");
    out << "# HELP sluice_orchestrator_dispatch_seconds Queued to dispatched, per stage.\n"
        << "# TYPE sluice_orchestrator_dispatch_seconds histogram\n";
    for (int st = 0; st < kStageCount; ++st) {
      hist("sluice_orchestrator_dispatch_seconds", "", s.dispatch_latency[st],
           "stage=\"" + std::string(StageName(static_cast<Stage>(st))) + "\"");
    }
    out << "# TYPE sluice_orchestrator_running gauge\nsluice_orchestrator_running "
        << s.scheduler.running << "\n";
    counter("sluice_orchestrator_jobs_submitted_total", "Jobs accepted.", s.submitted);
    counter("sluice_orchestrator_jobs_rejected_total", "Submissions answered 429.", s.rejected);
    counter("sluice_orchestrator_jobs_succeeded_total", "Jobs done.", s.succeeded);
    counter("sluice_orchestrator_jobs_failed_total", "Jobs failed.", s.failed);
    counter("sluice_orchestrator_jobs_cancelled_total", "Jobs cancelled.", s.cancelled);
    counter("sluice_orchestrator_dispatches_total", "Stage dispatches.", s.scheduler.dispatches);
    counter("sluice_orchestrator_preemptions_total", "Checkpoint preemptions.",
            s.scheduler.preemptions);
    counter("sluice_orchestrator_payloads_lost_total", "Store payloads lost; producer re-run.",
            s.payloads_lost);
    counter("sluice_orchestrator_jobs_restored_total",
            "Unfinished jobs taken back from the journal.", s.restored);
    res.set_content(out.str(), "text/plain; version=0.0.4");
  });
}

}  // namespace sluice::orchestrator
