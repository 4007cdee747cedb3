// HTTP requests and responses as the server hands them to handlers: plain
// strings, no Beast types, so handler code compiles without Boost.
#ifndef SLUICE_HTTP_MESSAGE_H_
#define SLUICE_HTTP_MESSAGE_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // "GET", "POST", ... as sent.
  std::string target;  // The request target as sent ("/v1/jobs/x?a=b").
  std::string path;    // The target up to '?', not percent-decoded.
  std::string query;   // After '?', raw.
  Headers headers;     // Names lower-cased, in the order received.
  std::string body;
  std::vector<std::string> params;  // Path parameters ({name} segments), in order.
  std::string peer;                 // Client address "host:port".

  // The first header named `lower_name` (lower case); empty if absent.
  std::string_view Header(std::string_view lower_name) const;
  // The query parameter `name`, percent-decoded ('+' is a space); nullopt
  // if absent.
  std::optional<std::string> Query(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  Headers headers;  // Extra headers; values must not contain CR or LF.
};

// OpenAI's error object: {"error": {"message", "type", "param", "code"}}
// (param and code are null when empty).
Response ErrorResponse(int status, std::string_view type, std::string_view message,
                       std::string_view param = {}, std::string_view code = {});

// ASCII lower case (header names, media types).
std::string AsciiLower(std::string_view s);

// "%41b+c" -> "Ab c". Malformed escapes are kept as they are.
std::string PercentDecode(std::string_view s);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_MESSAGE_H_
