// An HTTP request as a client sends it: parsed by Beast with the server's
// limits and turned into a sluice Request by the session's ToRequest, then
// validated as the API does: query parameters, a multipart form, and the
// body as an image and as a video generation request.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "http/message.h"
#include "http/multipart.h"
#include "http/server.h"
#include "http/session.h"
#include "orchestrator/service/http_api.h"

namespace beast = boost::beast;

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
  (void)req.Query("seed");
  (void)req.Query("n");
  const std::string_view type = req.Header("content-type");
  if (sluice::http::IsMultipartForm(type)) {
    (void)sluice::http::ParseMultipartForm(type, req.body);
  }
  bool async = false;
  (void)sluice::orchestrator::ParseGenerationRequest(req.body, "image", api, &async);
  (void)sluice::orchestrator::ParseGenerationRequest(req.body, "video", api, &async);
  return 0;
}
