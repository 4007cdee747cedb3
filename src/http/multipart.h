// multipart/form-data bodies (RFC 7578), as OpenAI's SDKs send them for
// uploads. No Debian C++ library offers a stand-alone parser (cpp-httplib's
// is an internal detail of its server), so this is a small strict one:
// iterative, bounded by the body (already within the server's body limit)
// and by a part count.
#ifndef SLUICE_HTTP_MULTIPART_H_
#define SLUICE_HTTP_MULTIPART_H_

#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::http {

struct FormPart {
  std::string name;          // Content-Disposition's name.
  std::string filename;      // Its filename; empty for a plain field.
  std::string content_type;  // The part's Content-Type; empty if none.
  std::string data;
  bool is_file() const { return !filename.empty(); }
};

// Whether `content_type` (a request's header) is multipart/form-data.
bool IsMultipartForm(std::string_view content_type);

// Splits `body` into its parts, the boundary taken from `content_type`.
// Errors: kInvalidArgument naming what is malformed (no boundary, a part
// without a name, an unterminated body, more than `max_parts` parts).
Result<std::vector<FormPart>> ParseMultipartForm(std::string_view content_type,
                                                 std::string_view body, std::size_t max_parts = 64);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_MULTIPART_H_
