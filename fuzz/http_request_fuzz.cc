// An HTTP request as a client sends it: parsed by Beast with the server's
// limits and turned into a sluice Request by the session's ToRequest, then
// validated as the API does: query parameters, a multipart form, and the
// body as an image and as a video generation request. A request the API
// accepts must keep every documented limit (RequestLimits, the server's
// body limit, the adapter entries' names and scales): one that does not
// aborts the run.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "sluice/adapters.h"

#include "http/message.h"
#include "http/multipart.h"
#include "http/server.h"
#include "http/session.h"
#include "orchestrator/service/http_api.h"

namespace beast = boost::beast;

namespace {

using nlohmann::json;

void Require(bool holds, const char* what, const std::string& request) {
  if (!holds) {
    std::fprintf(stderr, "accepted a request beyond its limits: %s\n%s\n", what, request.c_str());
    std::abort();
  }
}

bool IntIn(const json& j, const char* field, std::int64_t lo, std::int64_t hi) {
  return j.contains(field) && j[field].is_number_integer() && j[field].get<std::int64_t>() >= lo &&
         j[field].get<std::int64_t>() <= hi;
}

// What an accepted generation request of `kind` must be (http_api.h,
// RequestLimits): its normalized JSON within every limit.
void CheckAccepted(const sluice::orchestrator::JobRequest& r, std::string_view kind,
                   const sluice::RequestLimits& l) {
  const std::string& text = r.request_json;
  const json j = json::parse(text, nullptr, false);
  Require(j.is_object(), "its JSON is no object", text);
  Require(r.kind == (kind == "edit" ? "image" : kind), "another kind", text);
  Require(j.contains("prompt") && j["prompt"].is_string() &&
              !j["prompt"].get<std::string>().empty() &&
              j["prompt"].get<std::string>().size() <= 10000,
          "prompt", text);
  Require(!j.contains("n") || IntIn(j, "n", 1, l.max_images), "n", text);
  Require(!j.contains("steps") || IntIn(j, "steps", 1, l.max_steps), "steps", text);
  Require(!j.contains("guidance") ||
              (j["guidance"].is_number() && j["guidance"] >= 0 && j["guidance"] <= 30),
          "guidance", text);
  Require(j.contains("size") && j["size"].is_string(), "size filled in", text);
  const std::string size = j["size"];
  const std::size_t x = size.find('x');
  int w = 0, h = 0;
  Require(x != std::string::npos &&
              std::from_chars(size.data(), size.data() + x, w).ec == std::errc() &&
              std::from_chars(size.data() + x + 1, size.data() + size.size(), h).ec == std::errc(),
          "size is WIDTHxHEIGHT", text);
  Require(w >= 64 && h >= 64 && w <= 2048 && h <= 2048 && w % 8 == 0 && h % 8 == 0, "size", text);
  if (kind == "edit") {
    Require(!j.contains("strength") ||
                (j["strength"].is_number() && j["strength"] > 0 && j["strength"] <= 1),
            "strength", text);
  } else {
    Require(!j.contains("strength"), "strength only on edits", text);
  }
  if (j.contains("lora")) {
    const json& l = j["lora"];
    Require(l.is_array() && l.size() <= static_cast<std::size_t>(sluice::kMaxAdaptersPerRequest),
            "lora a short list", text);
    for (const json& e : l) {
      Require(e.is_object() && e.contains("name") && e["name"].is_string() &&
                  sluice::ValidAdapterName(e["name"].get<std::string>()),
              "lora name", text);
      Require(!e.contains("scale") ||
                  (e["scale"].is_number() && e["scale"] >= -sluice::kMaxAdapterScale &&
                   e["scale"] <= sluice::kMaxAdapterScale),
              "lora scale", text);
      Require(!e.contains("digest"), "a client's own digest", text);
    }
  }
  std::uint64_t frames = 1;
  if (kind == "video") {
    Require(IntIn(j, "frames", 1, l.max_frames), "frames filled in and in range", text);
    frames = j["frames"].get<std::uint64_t>();
  }
  Require(
      static_cast<std::uint64_t>(w) * static_cast<std::uint64_t>(h) * frames <= l.max_pixel_frames,
      "width x height x frames", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const sluice::http::ServerOptions limits;
  static const sluice::orchestrator::HttpOptions api;
  beast::http::request_parser<beast::http::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(limits.max_body_bytes);
  parser.eager(true);
  beast::error_code ec;
  std::size_t used = 0;
  const char* p = reinterpret_cast<const char*>(data);
  while (used < size && !parser.is_done()) {
    const std::size_t n = parser.put(boost::asio::buffer(p + used, size - used), ec);
    if (ec || n == 0) {
      break;
    }
    used += n;
  }
  if (!parser.is_done()) {
    parser.put_eof(ec);
  }
  if (!parser.is_done() || ec) {
    return 0;
  }
  const sluice::http::Request req = sluice::http::internal::ToRequest(parser.release(), "fuzz:1");
  Require(req.body.size() <= limits.max_body_bytes, "a body over the server's limit", "");
  (void)req.Query("seed");
  (void)req.Query("n");
  const std::string_view type = req.Header("content-type");
  if (sluice::http::IsMultipartForm(type)) {
    (void)sluice::http::ParseMultipartForm(type, req.body);
  }
  bool async = false;
  for (const char* kind : {"image", "video", "edit"}) {
    sluice::Result<sluice::orchestrator::JobRequest> r =
        sluice::orchestrator::ParseGenerationRequest(req.body, kind, api, &async);
    if (r.ok()) {
      CheckAccepted(*r, kind, api.limits);
    }
  }
  return 0;
}
