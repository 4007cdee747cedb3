#include "sluice/client/http_client.h"

#include <httplib.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

namespace sluice::client {
namespace {

using nlohmann::json;

std::string ErrorMessage(const httplib::Result& res) {
  const json j = json::parse(res->body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    return j["error"].value("message", res->body);
  }
  return res->body;
}

Status HttpStatus(const httplib::Result& res, const std::string& what) {
  if (!res && res.error() == httplib::Error::SSLServerVerification) {
    return Status(StatusCode::kUnavailable,
                  what +
                      ": the server's certificate is not trusted: it must chain to --ca-file "
                      "(or, without it, the system's roots) and name the host dialed");
  }
  if (!res) {
    return Status(StatusCode::kUnavailable,
                  what + ": no answer (" + httplib::to_string(res.error()) + ")");
  }
  const std::string m = what + ": HTTP " + std::to_string(res->status) + ": " + ErrorMessage(res);
  switch (res->status) {
    case 400:
      return InvalidArgumentError(m);
    case 404:
      return Status(StatusCode::kNotFound, m);
    case 429:
      return Status(StatusCode::kResourceExhausted, m);
    default:
      return Status(StatusCode::kInternal, m);
  }
}

// A client of `base_url`; https verifies the server against `ca_file` (or
// the system's roots) and the host it dials.
httplib::Client Connect(const std::string& base_url, const std::string& ca_file) {
  httplib::Client http(base_url);
  http.set_connection_timeout(5);
  if (base_url.rfind("https://", 0) == 0) {
    http.enable_server_certificate_verification(true);
    if (!ca_file.empty()) {
      http.set_ca_cert_path(ca_file);
    }
  }
  return http;
}

httplib::Headers Auth(const std::string& api_key) {
  if (api_key.empty()) {
    return {};
  }
  return {{"Authorization", "Bearer " + api_key}};
}

}  // namespace

Result<std::string> BaseUrl(const std::string& server) {
  std::string url = server;
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0) {
    if (url.find("://") != std::string::npos) {
      return InvalidArgumentError("server: only http:// and https:// are supported, got '" +
                                  server + "'");
    }
    url = "http://" + url;
  }
  while (!url.empty() && url.back() == '/') {
    url.pop_back();
  }
  const std::string hostport = url.substr(url.find("://") + 3);
  const auto colon = hostport.rfind(':');
  if (hostport.empty() || colon == 0 || hostport.find('/') != std::string::npos) {
    return InvalidArgumentError("server: '" + server +
                                "' is not host:port, http://host:port or https://host:port");
  }
  return url;
}

Result<std::string> Submit(const std::string& base_url, const GenerateRequest& r) {
  httplib::Client http = Connect(base_url, r.ca_file);
  json body = {{"prompt", r.prompt}, {"seed", r.seed}, {"priority", r.priority}};
  if (!r.size.empty()) {
    body["size"] = r.size;
  }
  if (r.steps.has_value()) {
    body["steps"] = *r.steps;
  }
  if (r.guidance.has_value()) {
    body["guidance"] = *r.guidance;
  }
  for (const auto& [name, scale] : r.lora) {
    body["lora"].push_back({{"name", name}, {"scale", scale}});
  }
  if (r.preview_every.has_value()) {
    body["preview_every"] = *r.preview_every;
  }
  if (!r.model.empty()) {
    body["model"] = r.model;
  }
  std::string path = "/v1/images/generations";
  if (r.video) {
    body["frames"] = r.frames;
    path = "/v1/videos";
  } else {
    body["async"] = true;
  }
  if (!r.picture.empty() && r.video) {
    return InvalidArgumentError("submit: a picture to edit is for images");
  }
  auto post = [&]() {
    if (r.picture.empty()) {
      return http.Post(path, Auth(r.api_key), body.dump(), "application/json");
    }
    if (r.strength.has_value()) {
      body["strength"] = *r.strength;
    }
    // The form OpenAI's images.edit sends: each field as text (JSON text
    // for the adapters), the picture as the file part "image".
    httplib::MultipartFormDataItems form;
    for (const auto& [name, value] : body.items()) {
      form.push_back({name, value.is_string() ? value.get<std::string>() : value.dump(), "", ""});
    }
    form.push_back({"image", r.picture, "picture.png", "image/png"});
    return http.Post("/v1/images/edits", Auth(r.api_key), form);
  };
  auto res = post();
  if (!res || (res->status != 200 && res->status != 202)) {
    return HttpStatus(res, "submit");
  }
  const json j = json::parse(res->body, nullptr, false);
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) {
    return Status(StatusCode::kInternal, "submit: the answer names no job id: " + res->body);
  }
  return j["id"].get<std::string>();
}

Result<Preview> FetchPreview(const std::string& base_url, const std::string& id,
                             const std::string& api_key, const std::string& ca_file) {
  httplib::Client http = Connect(base_url, ca_file);
  auto res = http.Get("/v1/jobs/" + id + "/preview", Auth(api_key));
  if (!res || res->status != 200) {
    return HttpStatus(res, "preview of " + id);
  }
  Preview p;
  p.png = std::move(res->body);
  const std::string step = res->get_header_value("X-Preview-Step");
  p.step = std::atoi(step.c_str());
  return p;
}

Status Cancel(const std::string& base_url, const std::string& id, const std::string& api_key,
              const std::string& ca_file) {
  httplib::Client http = Connect(base_url, ca_file);
  auto res = http.Delete("/v1/jobs/" + id, Auth(api_key));
  return res && res->status == 200 ? Status::Ok() : HttpStatus(res, "cancel " + id);
}

Result<JobOutcome> WaitAndFetch(const std::string& base_url, const std::string& id, bool mp4,
                                std::chrono::steady_clock::time_point submitted,
                                std::chrono::milliseconds timeout, const WaitOptions& wait) {
  httplib::Client http = Connect(base_url, wait.ca_file);
  const httplib::Headers auth = Auth(wait.api_key);
  JobOutcome out;
  out.id = id;
  JobProgress seen;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto res = http.Get("/v1/jobs/" + id, auth);
    if (!res || res->status != 200) {
      return HttpStatus(res, "job " + id);
    }
    const json j = json::parse(res->body, nullptr, false);
    out.status = j.is_object() ? j.value("status", "") : "";
    JobProgress now;
    now.status = out.status;
    now.stage = j.is_object() ? j.value("stage", "") : "";
    if (j.is_object() && j.contains("progress") && j["progress"].is_object()) {
      now.step = j["progress"].value("step", 0);
      now.steps = j["progress"].value("steps", 0);
    }
    now.elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted).count();
    now.ttff_s = j.is_object() && j.contains("ttff_ms") ? j["ttff_ms"].get<double>() / 1000 : -1;
    if (wait.on_progress && (now.status != seen.status || now.stage != seen.stage ||
                             now.step != seen.step || (now.ttff_s >= 0) != (seen.ttff_s >= 0))) {
      wait.on_progress(now);
    }
    seen = now;
    if (out.status == "succeeded" || out.status == "failed" || out.status == "cancelled") {
      out.latency_s = now.elapsed_s;
      out.error = j.value("error", "");
      out.ttff_s = now.ttff_s;
      break;
    }
    const bool stopped = wait.stop != nullptr && wait.stop->load();
    if (stopped || std::chrono::steady_clock::now() > deadline) {
      const Status cancel = Cancel(base_url, id, wait.api_key, wait.ca_file);
      const std::string what = cancel.ok()
                                   ? "; cancelled it"
                                   : "; cancelling it failed: " + std::string(cancel.message());
      return Status(stopped ? StatusCode::kCancelled : StatusCode::kDeadlineExceeded,
                    "job " + id + " still " + out.status +
                        (stopped ? " when stopped" : " after the timeout") + what);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (out.status != "succeeded") {
    return out;
  }
  // Muxing a video (ffmpeg) takes seconds on a busy host, more than the
  // client's 5 s default read timeout: wait as long as the job's timeout
  // still allows, and at least 30 s.
  const auto left =
      std::chrono::duration_cast<std::chrono::seconds>(deadline - std::chrono::steady_clock::now());
  http.set_read_timeout(std::max<std::chrono::seconds>(left, std::chrono::seconds(30)).count(), 0);
  auto res = http.Get((mp4 ? "/v1/videos/" : "/v1/jobs/") + id + "/content", auth);
  if (!res || res->status != 200) {
    return HttpStatus(res, "content of " + id);
  }
  out.content = std::move(res->body);
  out.content_type = res->get_header_value("Content-Type");
  return out;
}

}  // namespace sluice::client
