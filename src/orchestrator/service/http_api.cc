#include "orchestrator/service/http_api.h"

#include <charconv>
#include <deque>
#include <set>

#include "common/base64.h"
#include "common/log.h"
#include "common/metrics_text.h"
#include "common/mutex.h"
#include "http/multipart.h"
#include "http/server.h"
#include "media/frames_archive.h"
#include "media/png.h"
#include "media/resize.h"
#include "orchestrator/service/http_access.h"
#include "orchestrator/service/http_console.h"
#include "orchestrator/service/http_form.h"
#include "orchestrator/service/http_views.h"
#include "orchestrator/service/video_mux.h"

namespace sluice::orchestrator {
namespace {

using http::Exchange;
using http::Request;
using http::Response;
using nlohmann::json;
using ExchangePtr = std::shared_ptr<Exchange>;

Response JsonResponse(int status, const json& j) {
  Response r;
  r.status = status;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

Response BytesResponse(std::string body, const std::string& type) {
  Response r;
  r.content_type = type.empty() ? "application/octet-stream" : type;
  r.body = std::move(body);
  return r;
}

// A body that failed validation: 400 naming the field ("field: why").
Response BadRequest(const Status& s) {
  const std::string msg(s.message());
  return http::ErrorResponse(400, "invalid_request_error", msg, msg.substr(0, msg.find(':')),
                             "invalid_value");
}

Response StatusError(const Status& s) {
  switch (s.code()) {
    case StatusCode::kResourceExhausted: {
      // The queue is full, or the tenant is at its jobs in flight or its
      // share of the queue (the message says which).
      Response r =
          http::ErrorResponse(429, "rate_limit_exceeded", s.message(), {}, "rate_limit_exceeded");
      r.headers.emplace_back("Retry-After", "1");
      return r;
    }
    case StatusCode::kInvalidArgument:
      return BadRequest(s);
    case StatusCode::kNotFound:
      return http::ErrorResponse(404, "invalid_request_error", s.message(), {}, "not_found");
    default:
      return http::ErrorResponse(503, "server_error", s.message(), {}, "unavailable");
  }
}

// A submission's error: an unknown model is 404 model_not_found; a resumed
// job's missing job or checkpoint 404 not_found, naming resume_from.
Response SubmitError(const Status& s) {
  if (s.code() == StatusCode::kNotFound && s.message().starts_with("resume_from")) {
    return http::ErrorResponse(404, "invalid_request_error", s.message(), "resume_from",
                               "not_found");
  }
  if (s.code() == StatusCode::kNotFound) {
    return http::ErrorResponse(404, "invalid_request_error", s.message(), "model",
                               "model_not_found");
  }
  return StatusError(s);
}

// Who sent a request: its tenant, and whether the API is closed (keys).
struct Caller {
  std::string tenant;
  bool closed = false;
};

Response NoSuch(std::string_view what, const std::string& id) {
  return http::ErrorResponse(404, "invalid_request_error", "no " + std::string(what) + " " + id,
                             "id", "not_found");
}

// The job a path's {id} names, if the state still has it and it is the
// caller's (`tenant`; any job when the API is open).
std::optional<JobView> FindJob(OrchestratorState& state, const std::string& name,
                               const Caller& caller) {
  std::optional<JobId> id = state.Find(name);
  std::optional<JobView> v = id ? state.Get(*id) : std::nullopt;
  if (v.has_value() && caller.closed && v->tenant != caller.tenant) {
    return std::nullopt;  // Another tenant's: as if it did not exist.
  }
  return v;
}

// Hands `v`'s result bytes to `use`: an in-memory result at once, one in
// the result dir read on the blocking pool first (disk I/O). A result that
// is gone by then (expired, forgotten) answers 404 result_gone.
void WithResult(const OrchestratorState& state, JobView v, const ExchangePtr& ex,
                std::function<void(std::string bytes)> use) {
  if (!v.result_stored) {
    return use(std::move(v.result));
  }
  ex->RunBlocking([&state, v = std::move(v), ex, use = std::move(use)] {
    Result<std::string> bytes = state.ResultBytes(v);
    if (!bytes.ok()) {
      SLUICE_LOG(warn, "HTTP: {}", bytes.status().ToString());
      return ex->Respond(bytes.status().code() == StatusCode::kNotFound
                             ? http::ErrorResponse(404, "invalid_request_error",
                                                   "the result of " + v.name + " is no longer kept",
                                                   "id", "result_gone")
                             : http::ErrorResponse(500, "server_error",
                                                   "the result of " + v.name + " cannot be read",
                                                   {}, "result_unreadable"));
    }
    use(std::move(*bytes));
  });
}

// A synchronous images request: waits for its jobs on the connection's
// strand (woken by the state's watches), answers once all are done, one
// failed, the wait times out, or its client leaves (then its unfinished jobs
// are cancelled unless `keep`).
class SyncImages : public std::enable_shared_from_this<SyncImages> {
 public:
  SyncImages(OrchestratorState& state, ExchangePtr ex, std::vector<JobId> ids,
             std::vector<std::string> names, std::string base, bool url, bool keep)
      : state_(state),
        ex_(std::move(ex)),
        ids_(std::move(ids)),
        names_(std::move(names)),
        base_(std::move(base)),
        url_(url),
        keep_(keep) {}

  void Start(std::chrono::milliseconds timeout) {
    auto self = shared_from_this();
    for (JobId id : ids_) {
      tokens_.push_back(state_.Watch(id, [self] { self->ex_->Post([self] { self->Check(); }); }));
    }
    ex_->OnClose([self] { self->Abandoned(); });
    ex_->After(timeout, [self] { self->TimedOut(); });
    ex_->Post([self] { self->Check(); });  // They may have finished before the watches.
  }

 private:
  void Check() {
    if (done_) {
      return;
    }
    std::vector<JobView> views;
    bool stored = false;
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      std::optional<JobView> v = state_.Get(ids_[i]);
      if (v.has_value() && !v->finished()) {
        return;
      }
      if (!v.has_value() || v->status != JobStatus::kSucceeded) {
        const std::string why =
            v.has_value() ? std::string(JobStatusName(v->status)) + ": " + v->error : "job dropped";
        CancelUnfinished();
        if (v.has_value() && v->error_type == "invalid_request_error") {
          return Answer(http::ErrorResponse(400, "invalid_request_error", names_[i] + " " + why, {},
                                            "invalid_input"));
        }
        return Answer(
            http::ErrorResponse(500, "server_error", names_[i] + " " + why, {}, "job_failed"));
      }
      stored = stored || v->result_stored;
      views.push_back(std::move(*v));
    }
    if (url_ || !stored) {
      return Answer(Succeeded(views));
    }
    Finish();  // Results in the result dir: read on the blocking pool.
    auto self = shared_from_this();
    ex_->RunBlocking(
        [self, views = std::move(views)] { self->ex_->Respond(self->Succeeded(views)); });
  }

  // The answer once every job succeeded: each result's URL, or its bytes.
  Response Succeeded(const std::vector<JobView>& views) const {
    json data = json::array();
    for (const JobView& v : views) {
      if (url_) {
        data.push_back({{"url", base_ + "/v1/jobs/" + v.name + "/content"}});
        continue;
      }
      Result<std::string> bytes = state_.ResultBytes(v);
      if (!bytes.ok()) {
        return StatusError(bytes.status());
      }
      data.push_back({{"b64_json", Base64(*bytes)}});
    }
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    return JsonResponse(200,
                        {{"created", std::chrono::duration_cast<std::chrono::seconds>(now).count()},
                         {"id", names_[0]},
                         {"data", std::move(data)}});
  }

  void TimedOut() {
    if (done_) {
      return;
    }
    std::string names;
    for (const std::string& name : names_) {
      names += (names.empty() ? "" : ", ") + name;
    }
    // The jobs run on; their ids let the client fetch them later.
    Answer(http::ErrorResponse(504, "server_error", names + " still running", {}, "timeout"));
  }

  void Abandoned() {
    if (done_) {
      return;
    }
    Finish();
    if (!keep_) {
      CancelUnfinished();
      SLUICE_LOG(info, "HTTP: client of {} left; its unfinished jobs are cancelled", names_[0]);
    }
  }

  void CancelUnfinished() {
    for (JobId id : ids_) {
      (void)state_.Cancel(id);  // kNotFound: finished already.
    }
  }

  void Answer(Response r) {
    Finish();
    ex_->Respond(std::move(r));
  }

  // Ends the watches (they hold this object).
  void Finish() {
    done_ = true;
    for (std::uint64_t t : tokens_) {
      state_.Unwatch(t);
    }
    tokens_.clear();
  }

  OrchestratorState& state_;
  ExchangePtr ex_;
  std::vector<JobId> ids_;
  std::vector<std::string> names_;  // Public ids, as ids_.
  std::string base_;
  bool url_, keep_;
  std::vector<std::uint64_t> tokens_;
  bool done_ = false;  // On the strand only.
};

// A job's events as server-sent events: `id:` is the event's index (a
// reconnecting client's Last-Event-ID resumes after it); after the job's
// last event comes `event: end` with the job itself, then the stream ends.
class EventFeed : public std::enable_shared_from_this<EventFeed> {
 public:
  EventFeed(OrchestratorState& state, ExchangePtr ex, JobId id, std::size_t next)
      : state_(state), ex_(std::move(ex)), id_(id), next_(next) {}

  void Start() {
    auto self = shared_from_this();
    ex_->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}, ": keep-alive\n\n");
    token_ = state_.Watch(id_, [self] { self->ex_->Post([self] { self->Pump(); }); });
    ex_->OnClose([self] { self->Stop(); });
    ex_->Post([self] { self->Pump(); });
  }

 private:
  void Pump() {
    if (stopped_) {
      return;
    }
    auto [events, finished] = state_.EventsFrom(id_, next_, std::chrono::milliseconds(0));
    std::string out;
    for (const JobEvent& e : events) {
      out += "id: " + std::to_string(next_++) + "\nevent: " + e.type +
             "\ndata: " + EventJson(e).dump(-1, ' ', false, json::error_handler_t::replace) +
             "\n\n";
    }
    if (finished) {
      std::optional<JobView> v = state_.Get(id_);
      out += "event: end\ndata: " +
             (v.has_value() ? JobJson(*v) : json{{"status", "dropped"}})
                 .dump(-1, ' ', false, json::error_handler_t::replace) +
             "\n\n";
    }
    ex_->Send(std::move(out));
    if (finished) {
      ex_->End();
      Stop();
    }
  }

  void Stop() {
    stopped_ = true;
    state_.Unwatch(token_);
  }

  OrchestratorState& state_;
  ExchangePtr ex_;
  JobId id_;
  std::size_t next_;
  std::uint64_t token_ = 0;
  bool stopped_ = false;  // On the strand only.
};

// MP4s made from frames archives, newest last (a few, for repeated GETs).
class Mp4Cache {
 public:
  std::optional<std::string> Find(JobId id) {
    MutexLock lock(mu_);
    for (const auto& [job, mp4] : items_) {
      if (job == id) {
        return mp4;
      }
    }
    return std::nullopt;
  }
  void Add(JobId id, std::string mp4) {
    MutexLock lock(mu_);
    items_.emplace_back(id, std::move(mp4));
    if (items_.size() > 8) {
      items_.pop_front();
    }
  }

 private:
  Mutex mu_;
  std::deque<std::pair<JobId, std::string>> items_ SLUICE_GUARDED_BY(mu_);
};

// Image edits' bounds: the picture as uploaded, and the output (the
// picture rides with the request, scaled to the output's size).
constexpr std::int64_t kMaxEditUploadPixels = std::int64_t{2048} * 2048;
constexpr int kMaxEditSide = 512;

// A multipart request's form as its JSON body (http_form.h).
Result<std::string> FormBody(const Request& req, const std::string& picture_field,
                             const std::string& job, std::string* picture) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<http::FormPart> parts,
                          http::ParseMultipartForm(req.Header("content-type"), req.body));
  return FormAsJson(std::move(parts), picture_field, job, picture);
}

// The edit's picture decoded (bounded), scaled to the job's size and
// encoded again, into `body` as "image" (base64 PNG). Errors:
// kInvalidArgument naming image or size.
Status AttachPicture(const std::string& picture, json& body, const std::string& field = "image") {
  Result<media::RgbImage> in = media::DecodePng(picture, kMaxEditUploadPixels);
  if (!in.ok()) {
    return InvalidArgumentError(field + ": " + std::string(in.status().message()) +
                                " (a PNG of at most 2048x2048 pixels)");
  }
  const auto wh = ParseSize(body["size"].get<std::string>());
  if (!wh.ok() || wh->first > kMaxEditSide || wh->second > kMaxEditSide) {
    return InvalidArgumentError("size: with a picture to start from, at most " +
                                std::to_string(kMaxEditSide) + "x" + std::to_string(kMaxEditSide));
  }
  const media::RgbImage sized = media::ResizeRgb(*in, wh->first, wh->second);
  SLUICE_ASSIGN_OR_RETURN(std::string png,
                          media::EncodePng(sized.rgb.data(), sized.width, sized.height));
  body["image"] = internal::Base64Encode(png);
  return Status::Ok();
}

// Names a request's adapters by their digests (AdapterRegistry::Resolve).
// Errors: kNotFound naming the unknown adapter.
Status ResolveAdapters(const HttpOptions& o, JobRequest& r) {
  if (r.request_json.find("\"lora\"") == std::string::npos) {
    return Status::Ok();
  }
  json j = json::parse(r.request_json);
  if (!j.contains("lora") || j["lora"].empty()) {
    return Status::Ok();
  }
  if (o.adapters == nullptr) {
    return NotFoundError("lora[0].name: no adapter \"" + j["lora"][0]["name"].get<std::string>() +
                         "\" (this deployment serves no adapters)");
  }
  SLUICE_RETURN_IF_ERROR(o.adapters->Resolve(j));
  r.request_json = j.dump();
  r.affinity = std::string(kAdapterAffinity) + j["lora"][0]["digest"].get<std::string>();
  return Status::Ok();
}

Response AdapterNotFound(const Status& s) {
  return http::ErrorResponse(404, "invalid_request_error", s.message(), "lora",
                             "adapter_not_found");
}

// A picture sent to a model that reads none (no worker of it declared
// StageWorkerConfig::takes_picture): 400 naming the model and the field.
Response NoPicture(OrchestratorState& state, const JobRequest& r, const std::string& field) {
  const std::string model = r.model.empty() ? state.default_model() : r.model;
  return http::ErrorResponse(
      400, "invalid_request_error",
      field + ": model '" + model + "' does not take a picture (none of its workers reads one)",
      field, "picture_not_supported");
}

void SubmitImages(OrchestratorState& state, const HttpOptions& o, Request& req,
                  const ExchangePtr& ex, const Caller& caller, bool edit = false) {
  bool async = false;
  std::string picture, form;
  if (edit) {
    if (!http::IsMultipartForm(req.Header("content-type"))) {
      return ex->Respond(BadRequest(
          InvalidArgumentError("body: multipart/form-data with the image and the prompt")));
    }
    Result<std::string> body = FormBody(req, "image", "edit", &picture);
    if (!body.ok()) {
      return ex->Respond(BadRequest(body.status()));
    }
    if (picture.empty()) {
      return ex->Respond(BadRequest(InvalidArgumentError("image: required, the PNG to edit")));
    }
    form = std::move(*body);
  }
  Result<JobRequest> r = ParseGenerationRequest(
      edit ? form : req.body, edit ? "edit" : "image", o, &async,
      [&state](const std::string& m) { return state.DefaultSize(m, false); });
  if (!r.ok()) {
    return ex->Respond(BadRequest(r.status()));
  }
  if (Status s = ResolveAdapters(o, *r); !s.ok()) {
    return ex->Respond(AdapterNotFound(s));
  }
  if (edit && !state.TakesPicture(r->model)) {
    return ex->Respond(NoPicture(state, *r, "image"));
  }
  if (edit) {
    json with_picture = json::parse(r->request_json);
    if (Status s = AttachPicture(picture, with_picture); !s.ok()) {
      return ex->Respond(BadRequest(s));
    }
    r->request_json = with_picture.dump();
  }
  r->tenant = caller.tenant;
  // One job per image (seed + i), all or none accepted.
  const json body = json::parse(r->request_json);
  const int n = body.value("n", 1);
  std::vector<JobId> ids;
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) {
    JobRequest one = *r;
    json b = body;
    b["n"] = 1;
    b["index"] = i;
    b["seed"] = body["seed"].get<std::uint64_t>() + static_cast<std::uint64_t>(i);
    one.request_json = b.dump();
    Result<JobId> id = state.Submit(one);
    if (!id.ok()) {
      for (JobId done : ids) {
        (void)state.Cancel(done);
      }
      return ex->Respond(SubmitError(id.status()));
    }
    ids.push_back(*id);
    names.push_back(state.Get(*id)->name);
  }
  if (async) {
    if (n == 1) {
      return ex->Respond(JsonResponse(202, JobJson(*state.Get(ids[0]))));
    }
    json list = {{"object", "list"}, {"data", json::array()}};
    for (JobId id : ids) {
      list["data"].push_back(JobJson(*state.Get(id)));
    }
    return ex->Respond(JsonResponse(202, list));
  }
  // "url": the job's content, served while the orchestrator keeps the job
  // (the newest max_finished_jobs).
  const bool url = body.value("response_format", "b64_json") == "url";
  const std::string host(req.Header("host"));
  auto wait = std::make_shared<SyncImages>(state, ex, std::move(ids), std::move(names),
                                           host.empty() ? "" : "http://" + host, url,
                                           o.keep_abandoned_jobs);
  wait->Start(o.sync_timeout);
}

void SubmitVideo(OrchestratorState& state, const HttpOptions& o, Request& req,
                 const ExchangePtr& ex, const Caller& caller) {
  std::string form, picture;
  if (http::IsMultipartForm(req.Header("content-type"))) {
    Result<std::string> body = FormBody(req, "input_reference", "video", &picture);
    if (!body.ok()) {
      return ex->Respond(BadRequest(body.status()));
    }
    form = std::move(*body);
  }
  bool async = true;
  Result<JobRequest> r = ParseGenerationRequest(
      form.empty() ? req.body : form, picture.empty() ? "video" : "video_reference", o, &async,
      [&state](const std::string& m) { return state.DefaultSize(m, true); });
  if (!r.ok()) {
    return ex->Respond(BadRequest(r.status()));
  }
  if (Status s = ResolveAdapters(o, *r); !s.ok()) {
    return ex->Respond(AdapterNotFound(s));
  }
  if (!picture.empty() && !state.TakesPicture(r->model)) {
    return ex->Respond(NoPicture(state, *r, "input_reference"));
  }
  if (!picture.empty()) {
    json with_picture = json::parse(r->request_json);
    if (Status s = AttachPicture(picture, with_picture, "input_reference"); !s.ok()) {
      return ex->Respond(BadRequest(s));
    }
    r->request_json = with_picture.dump();
  }
  r->tenant = caller.tenant;
  Result<JobId> id = state.Submit(*r);
  if (!id.ok()) {
    return ex->Respond(SubmitError(id.status()));
  }
  ex->Respond(JsonResponse(200, VideoJson(*state.Get(*id))));
}

// GET /v1/videos: OpenAI's list (after, limit 1..100, order asc|desc).
// A page of the caller's jobs of `kind` ("": every kind) as OpenAI's
// list object, each written by `view`: `limit` (1..100, default 20),
// `order` ("asc" or "desc", default newest first) and `after` (an id of
// the list's) from the query.
void ListJobs(OrchestratorState& state, const Request& req, const ExchangePtr& ex,
              const Caller& caller, std::string_view kind, json (*view)(const JobView&)) {
  std::size_t limit = 20;
  if (std::optional<std::string> l = req.Query("limit")) {
    auto [end, ec] = std::from_chars(l->data(), l->data() + l->size(), limit);
    if (ec != std::errc() || end != l->data() + l->size() || limit < 1 || limit > 100) {
      return ex->Respond(http::ErrorResponse(
          400, "invalid_request_error", "limit: an integer in 1..100", "limit", "invalid_value"));
    }
  }
  const std::string order = req.Query("order").value_or("desc");
  if (order != "asc" && order != "desc") {
    return ex->Respond(http::ErrorResponse(400, "invalid_request_error",
                                           "order: \"asc\" or \"desc\"", "order", "invalid_value"));
  }
  JobId after = 0;
  if (std::optional<std::string> a = req.Query("after")) {
    std::optional<JobView> v = FindJob(state, *a, caller);
    if (!v.has_value() || (!kind.empty() && v->kind != kind)) {
      const std::string what = kind.empty() ? "job" : std::string(kind);
      return ex->Respond(http::ErrorResponse(400, "invalid_request_error",
                                             "after: a " + what + " id", "after", "invalid_value"));
    }
    after = v->id;
  }
  // One more than asked, to know whether there is more.
  std::vector<JobView> views =
      state.List(kind, caller.tenant, !caller.closed, after, limit + 1, order == "asc");
  const bool more = views.size() > limit;
  views.resize(std::min(views.size(), limit));
  json data = json::array();
  for (const JobView& v : views) {
    data.push_back(view(v));
  }
  ex->Respond(
      JsonResponse(200, {{"object", "list"},
                         {"data", std::move(data)},
                         {"first_id", views.empty() ? json(nullptr) : json(views.front().name)},
                         {"last_id", views.empty() ? json(nullptr) : json(views.back().name)},
                         {"has_more", more}}));
}

// A video's bytes: frames archives become MP4 (ffmpeg, on the blocking
// pool) when ffmpeg is known, else the archive itself is served.
void VideoContent(const OrchestratorState& state, JobView v, const std::string& ffmpeg,
                  const std::shared_ptr<Mp4Cache>& cache, const ExchangePtr& ex) {
  const bool archive = v.result_type == media::kFramesArchiveType;
  if (archive && !ffmpeg.empty()) {
    if (std::optional<std::string> mp4 = cache->Find(v.id)) {
      return ex->Respond(BytesResponse(std::move(*mp4), "video/mp4"));
    }
  }
  const JobId id = v.id;
  const std::string type = v.result_type, request_json = v.request_json;
  WithResult(state, std::move(v), ex,
             [archive, id, type, request_json, ffmpeg, cache, ex](std::string bytes) {
               if (!archive) {
                 return ex->Respond(BytesResponse(std::move(bytes), type));
               }
               if (ffmpeg.empty()) {
                 return ex->Respond(BytesResponse(std::move(bytes), "application/x-tar"));
               }
               ex->RunBlocking([id, bytes = std::move(bytes), request_json, ffmpeg, cache, ex] {
                 const json request = json::parse(request_json, nullptr, false);
                 const int fps = request.is_object() ? request.value("fps", 16) : 16;
                 Result<std::string> mp4 = FramesToMp4(bytes, fps, ffmpeg);
                 if (!mp4.ok()) {
                   return ex->Respond(http::ErrorResponse(
                       500, "server_error", mp4.status().message(), {}, "encode_failed"));
                 }
                 cache->Add(id, *mp4);
                 ex->Respond(BytesResponse(std::move(*mp4), "video/mp4"));
               });
             });
}

// The stages of `m` its jobs run here (all, or the colocated subset)
// that no registered worker serves.
std::vector<std::string> Unserved(const ModelView& m, const ServiceOptions& o) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < m.stages.size(); ++i) {
    const std::string& stage = m.stages[i].name;
    const bool runs = !o.pipeline.has_value() ||
                      std::find(o.pipeline->begin(), o.pipeline->end(), stage) != o.pipeline->end();
    if (runs && m.workers[i] == 0) {
      out.push_back(stage);
    }
  }
  return out;
}

// OpenAI's model object, with sluice's pipeline and readiness beside it.
json ModelJson(const ModelView& m, const ServiceOptions& o) {
  json stages = json::array();
  for (std::size_t i = 0; i < m.stages.size(); ++i) {
    stages.push_back({{"name", m.stages[i].name},
                      {"kind", m.stages[i].kind == StageKind::kAdmission ? "admission" : "work"},
                      {"progress_weight", ProgressWeight(m.stages[i])},
                      {"workers", m.workers[i]}});
  }
  return {{"id", m.name},
          {"object", "model"},
          {"created", m.created_unix_s},
          {"owned_by", "sluice"},
          {"stages", std::move(stages)},
          {"ready", Unserved(m, o).empty()},
          {"default", m.name == o.default_model}};
}

// /readyz: 200 when every declared model (or the one `?model=` names) has
// a registered worker for every stage its jobs run, else 503 naming what
// is missing. The body lists each model's readiness.
Response Readiness(OrchestratorState& state, const Request& req) {
  const std::string only = req.Query("model").value_or("");
  json models = json::object();
  std::string missing;
  bool found = only.empty();
  for (const ModelView& m : state.Models()) {
    if (!only.empty() && m.name != only) {
      continue;
    }
    found = true;
    const std::vector<std::string> unserved = Unserved(m, state.options());
    models[m.name] = {{"ready", unserved.empty()}, {"unserved_stages", unserved}};
    for (const std::string& stage : unserved) {
      missing += (missing.empty() ? "" : ", ") + m.name + "/" + stage;
    }
  }
  if (!found) {
    return http::ErrorResponse(404, "invalid_request_error", "no model '" + only + "'", "model",
                               "model_not_found");
  }
  if (!missing.empty()) {
    Response r = http::ErrorResponse(503, "server_error", "no registered worker for " + missing, {},
                                     "not_ready");
    json body = json::parse(r.body);
    body["models"] = std::move(models);
    r.body = body.dump();
    return r;
  }
  return JsonResponse(200, {{"status", "ready"}, {"models", std::move(models)}});
}

void ModelById(OrchestratorState& state, const std::string& id, const ExchangePtr& ex) {
  for (const ModelView& m : state.Models()) {
    if (m.name == id) {
      return ex->Respond(JsonResponse(200, ModelJson(m, state.options())));
    }
  }
  ex->Respond(http::ErrorResponse(404, "invalid_request_error", "no model '" + id + "'", "model",
                                  "model_not_found"));
}

}  // namespace

json AdapterJson(const AdapterRegistry::Entry& e) {
  return {{"id", e.name},
          {"object", "adapter"},
          {"digest", e.digest},
          {"rank", e.rank},
          {"bytes", e.bytes}};
}

// /v1/adapters: list, register (the file as the body, its name in the
// query: POST /v1/adapters?name=NAME), remove.
template <typename Add>
void InstallAdapterRoutes(const HttpOptions& o, Add& add) {
  std::shared_ptr<AdapterRegistry> reg = o.adapters;
  add("GET", "/v1/adapters", [reg](Request&, const ExchangePtr& ex, const Caller&) {
    json list = {{"object", "list"}, {"data", json::array()}};
    for (const AdapterRegistry::Entry& e :
         reg ? reg->List() : std::vector<AdapterRegistry::Entry>{}) {
      list["data"].push_back(AdapterJson(e));
    }
    ex->Respond(JsonResponse(200, list));
  });
  add("POST", "/v1/adapters", [reg](Request& req, const ExchangePtr& ex, const Caller&) {
    if (reg == nullptr || !reg->serving()) {
      return ex->Respond(http::ErrorResponse(501, "invalid_request_error",
                                             "this deployment serves no adapters", {},
                                             "adapters_not_served"));
    }
    const std::string name = req.Query("name").value_or("");
    if (name.empty()) {
      return ex->Respond(BadRequest(
          InvalidArgumentError("name: required, in the query (POST /v1/adapters?name=NAME)")));
    }
    if (req.body.empty()) {
      return ex->Respond(BadRequest(InvalidArgumentError("body: the adapter's safetensors file")));
    }
    Result<AdapterRegistry::Entry> e = reg->Register(name, std::move(req.body));
    if (!e.ok()) {
      if (e.status().code() == StatusCode::kAlreadyExists) {
        return ex->Respond(http::ErrorResponse(409, "invalid_request_error", e.status().message(),
                                               "name", "adapter_exists"));
      }
      return ex->Respond(StatusError(e.status()));
    }
    ex->Respond(JsonResponse(201, AdapterJson(*e)));
  });
  add("DELETE", "/v1/adapters/{id}", [reg](Request& req, const ExchangePtr& ex, const Caller&) {
    const std::string name = http::PercentDecode(req.params[0]);
    if (reg == nullptr || !reg->Remove(name).ok()) {
      return ex->Respond(NoSuch("adapter", name));
    }
    ex->Respond(
        JsonResponse(200, {{"id", name}, {"object", "adapter.deleted"}, {"deleted", true}}));
  });
}

void InstallHttpApi(http::Router& router, OrchestratorState& state, const HttpOptions& options) {
  OrchestratorState* st = &state;
  const HttpOptions o = options;
  auto cache = std::make_shared<Mp4Cache>();
  auto access = std::make_shared<HttpAccess>(options.access);
  if (!access->closed()) {
    SLUICE_LOG(warn,
               "HTTP API is open: anyone who reaches it may submit, read and cancel any "
               "job (give --api-keys to require keys)");
  }
  using Authed = std::function<void(Request&, const ExchangePtr&, const Caller&)>;
  // Routes that need a caller: a known key when the API is closed (401).
  // The key is checked from the head too, so a request without one is
  // refused before its body is read.
  auto add = [&router, access](const char* method, const char* path, Authed h) {
    router.Add(
        method, path,
        [access, h = std::move(h)](Request& req, ExchangePtr ex) {
          std::optional<std::string> tenant = access->Tenant(req);
          if (!tenant.has_value()) {
            return ex->Respond(Unauthorized());
          }
          h(req, ex, Caller{*tenant, access->closed()});
        },
        [access](const Request& head) -> std::optional<Response> {
          if (access->Tenant(head).has_value()) {
            return std::nullopt;
          }
          return Unauthorized();
        });
  };
  // Submissions also take a token of the tenant's rate (429 when out).
  auto submit = [access](const Caller& c, const ExchangePtr& ex) {
    int retry_after = 1;
    if (access->AdmitSubmission(c.tenant, &retry_after)) {
      return true;
    }
    Response r = http::ErrorResponse(429, "rate_limit_exceeded",
                                     "tenant '" + c.tenant + "' is over its request rate", {},
                                     "rate_limit_exceeded");
    r.headers.emplace_back("Retry-After", std::to_string(retry_after));
    ex->Respond(std::move(r));
    return false;
  };

  add("POST", "/v1/images/generations",
      [st, o, submit](Request& req, const ExchangePtr& ex, const Caller& c) {
        if (submit(c, ex)) {
          SubmitImages(*st, o, req, ex, c);
        }
      });
  add("POST", "/v1/images/edits",
      [st, o, submit](Request& req, const ExchangePtr& ex, const Caller& c) {
        if (submit(c, ex)) {
          SubmitImages(*st, o, req, ex, c, /*edit=*/true);
        }
      });
  add("POST", "/v1/videos", [st, o, submit](Request& req, const ExchangePtr& ex, const Caller& c) {
    if (submit(c, ex)) {
      SubmitVideo(*st, o, req, ex, c);
    }
  });
  add("GET", "/v1/videos", [st](Request& req, const ExchangePtr& ex, const Caller& c) {
    ListJobs(*st, req, ex, c, "video", VideoJson);
  });
  add("DELETE", "/v1/videos/{id}", [st](Request& req, const ExchangePtr& ex, const Caller& c) {
    std::optional<JobView> v = FindJob(*st, req.params[0], c);
    if (!v.has_value() || v->kind != "video" || !st->Forget(v->id).ok()) {
      return ex->Respond(NoSuch("video", req.params[0]));
    }
    ex->Respond(
        JsonResponse(200, {{"id", v->name}, {"object", "video.deleted"}, {"deleted", true}}));
  });
  add("GET", "/v1/videos/{id}", [st](Request& req, const ExchangePtr& ex, const Caller& c) {
    std::optional<JobView> v = FindJob(*st, req.params[0], c);
    if (!v.has_value() || v->kind != "video") {
      return ex->Respond(NoSuch("video", req.params[0]));
    }
    ex->Respond(JsonResponse(200, VideoJson(*v)));
  });
  add("GET", "/v1/videos/{id}/content",
      [st, o, cache](Request& req, const ExchangePtr& ex, const Caller& c) {
        std::optional<JobView> v = FindJob(*st, req.params[0], c);
        if (!v.has_value() || v->kind != "video") {
          return ex->Respond(NoSuch("video", req.params[0]));
        }
        if (v->status != JobStatus::kSucceeded) {
          return ex->Respond(http::ErrorResponse(
              409, "invalid_request_error", "video is " + std::string(JobStatusName(v->status)), {},
              "video_not_ready"));
        }
        VideoContent(*st, std::move(*v), o.ffmpeg, cache, ex);
      });
  add("GET", "/v1/models", [st](Request&, const ExchangePtr& ex, const Caller&) {
    json list = {{"object", "list"}, {"data", json::array()}};
    for (const ModelView& m : st->Models()) {
      list["data"].push_back(ModelJson(m, st->options()));
    }
    ex->Respond(JsonResponse(200, list));
  });
  // An id may hold one '/' ("org/name"), raw or percent-encoded.
  add("GET", "/v1/models/{id}", [st](Request& req, const ExchangePtr& ex, const Caller&) {
    ModelById(*st, http::PercentDecode(req.params[0]), ex);
  });
  add("GET", "/v1/models/{org}/{name}", [st](Request& req, const ExchangePtr& ex, const Caller&) {
    ModelById(*st, http::PercentDecode(req.params[0]) + "/" + http::PercentDecode(req.params[1]),
              ex);
  });
  InstallAdapterRoutes(o, add);
  add("GET", "/v1/jobs", [st](Request& req, const ExchangePtr& ex, const Caller& c) {
    ListJobs(*st, req, ex, c, "", JobJson);
  });
  // The cluster as the console shows it (ClusterJson): now, or as
  // server-sent events, one each time it changes (checked every second).
  // Any key: pools and counters are the cluster's, not a tenant's.
  add("GET", "/v1/cluster", [st](Request&, const ExchangePtr& ex, const Caller&) {
    ex->Respond(JsonResponse(200, ClusterJson(st->Stats())));
  });
  add("GET", "/v1/cluster/events", [st](Request&, const ExchangePtr& ex, const Caller&) {
    StreamCluster(*st, ex, std::chrono::seconds(1));
  });
  add("GET", "/v1/jobs/{id}", [st](Request& req, const ExchangePtr& ex, const Caller& c) {
    std::optional<JobView> v = FindJob(*st, req.params[0], c);
    if (!v.has_value()) {
      return ex->Respond(NoSuch("job", req.params[0]));
    }
    ex->Respond(JsonResponse(200, JobJson(*v)));
  });
  // Any finished job's result bytes (a PNG image, a frames archive), as the
  // final stage returned them.
  add("GET", "/v1/jobs/{id}/content", [st](Request& req, const ExchangePtr& ex, const Caller& c) {
    std::optional<JobView> v = FindJob(*st, req.params[0], c);
    if (!v.has_value()) {
      return ex->Respond(NoSuch("job", req.params[0]));
    }
    if (v->status != JobStatus::kSucceeded) {
      return ex->Respond(http::ErrorResponse(409, "invalid_request_error",
                                             "job is " + std::string(JobStatusName(v->status)), {},
                                             "job_not_ready"));
    }
    const std::string type = v->result_type;
    WithResult(*st, std::move(*v), ex, [ex, type](std::string bytes) {
      ex->Respond(BytesResponse(std::move(bytes), type));
    });
  });
  add("DELETE", "/v1/jobs/{id}", [st](Request& req, const ExchangePtr& ex, const Caller& c) {
    std::optional<JobView> v = FindJob(*st, req.params[0], c);
    Status s = v ? st->Cancel(v->id) : NotFoundError("no job " + req.params[0]);
    if (!s.ok()) {
      return ex->Respond(StatusError(s));
    }
    ex->Respond(JsonResponse(200, JobJson(*st->Get(v->id))));
  });
  // The newest preview of a job that asked for them (preview_every): a PNG,
  // with the step it shows in X-Preview-Step; 404 before the first.
  add("GET", "/v1/jobs/{id}/preview", [st](Request& req, const ExchangePtr& ex, const Caller& c) {
    std::optional<JobView> v = FindJob(*st, req.params[0], c);
    if (!v.has_value()) {
      return ex->Respond(NoSuch("job", req.params[0]));
    }
    std::optional<OrchestratorState::PreviewImage> p = st->Preview(v->id);
    if (!p.has_value()) {
      return ex->Respond(http::ErrorResponse(404, "invalid_request_error",
                                             "job " + req.params[0] + " has no preview yet", {},
                                             "no_preview"));
    }
    Response r = BytesResponse(std::move(p->png), "image/png");
    r.headers.emplace_back("X-Preview-Step", std::to_string(p->step));
    ex->Respond(std::move(r));
  });
  add("GET", "/v1/jobs/{id}/events", [st](Request& req, const ExchangePtr& ex, const Caller& c) {
    std::optional<JobView> v = FindJob(*st, req.params[0], c);
    if (!v.has_value()) {
      return ex->Respond(NoSuch("job", req.params[0]));
    }
    std::size_t next = 0;
    const std::string_view last(req.Header("last-event-id"));
    if (!last.empty()) {
      std::size_t n = 0;
      auto [end, ec] = std::from_chars(last.data(), last.data() + last.size(), n);
      if (ec != std::errc() || end != last.data() + last.size()) {
        return ex->Respond(http::ErrorResponse(400, "invalid_request_error",
                                               "Last-Event-ID: an event id (an integer)",
                                               "Last-Event-ID", "invalid_value"));
      }
      next = n + 1;
    }
    std::make_shared<EventFeed>(*st, ex, v->id, next)->Start();
  });

  auto alive = [](Request&, ExchangePtr ex) {
    Response r;
    r.content_type = "text/plain";
    r.body = "ok\n";
    ex->Respond(std::move(r));
  };
  router.Add("GET", "/healthz", alive);
  router.Add("GET", "/health", alive);
  router.Add("GET", "/readyz",
             [st](Request& req, ExchangePtr ex) { ex->Respond(Readiness(*st, req)); });
  // What an external autoscaler reads: each pool's size, load and
  // recommended size (sluice/orchestrator/autoscale.h). Open, as /metrics.
  router.Add("GET", "/v1/autoscale", [st](Request&, ExchangePtr ex) {
    ex->Respond(JsonResponse(200, AutoscaleJson(st->Recommendations())));
  });
  InstallConsoleFiles(router);
  // OpenMetrics (exemplars) to a scraper that asks for it, as Prometheus
  // does; Prometheus text to anyone else.
  router.Add("GET", "/metrics", [st](Request& req, ExchangePtr ex) {
    const bool om = internal::WantsOpenMetrics(req.Header("accept"));
    Response r;
    r.content_type = internal::MetricsContentType(om);
    r.body = MetricsText(st->Stats(), om);
    ex->Respond(std::move(r));
  });
}

}  // namespace sluice::orchestrator
