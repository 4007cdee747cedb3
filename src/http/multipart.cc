#include "http/multipart.h"

#include <algorithm>
#include <cctype>

#include "http/message.h"

namespace sluice::http {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

// The value of parameter `key` in `type; a=1; b="x;y"` (quotes and
// backslash escapes removed); empty if absent or if its quote never closes.
std::string Param(std::string_view header, std::string_view key) {
  const std::size_t n = header.size();
  auto space = [&](std::size_t k) { return k < n && (header[k] == ' ' || header[k] == '\t'); };
  std::size_t i = header.find(';');
  while (i < n) {
    ++i;  // Past ';'.
    while (space(i)) {
      ++i;
    }
    const std::size_t name_at = i;
    while (i < n && header[i] != '=' && header[i] != ';') {
      ++i;
    }
    const std::string name = AsciiLower(Trim(header.substr(name_at, i - name_at)));
    if (i >= n || header[i] == ';') {
      continue;  // A parameter without a value.
    }
    ++i;  // Past '='.
    while (space(i)) {
      ++i;
    }
    std::string value;
    if (i < n && header[i] == '"') {
      for (++i; i < n && header[i] != '"'; ++i) {
        if (header[i] == '\\' && i + 1 < n) {
          ++i;
        }
        value += header[i];
      }
      if (i >= n) {
        value.clear();  // Unterminated: not a value (a cut-short header).
      }
    } else {
      const std::size_t value_at = i;
      while (i < n && header[i] != ';') {
        ++i;
      }
      value = std::string(Trim(header.substr(value_at, i - value_at)));
    }
    if (name == key) {
      return value;
    }
    i = header.find(';', i);
  }
  return {};
}

Status Bad(std::string_view why) {
  return InvalidArgumentError("body: multipart/form-data: " + std::string(why));
}

}  // namespace

bool IsMultipartForm(std::string_view content_type) {
  return AsciiLower(Trim(content_type.substr(0, content_type.find(';')))) == "multipart/form-data";
}

Result<std::vector<FormPart>> ParseMultipartForm(std::string_view content_type,
                                                 std::string_view body, std::size_t max_parts) {
  const std::string boundary = Param(content_type, "boundary");
  if (boundary.empty() || boundary.size() > 70) {
    return Bad("no boundary (1..70 characters) in the Content-Type");
  }
  const std::string delimiter = "--" + boundary;
  // The first delimiter opens the body (a preamble before it is ignored).
  std::size_t at = body.starts_with(delimiter) ? 0 : body.find("\r\n" + delimiter);
  if (at == std::string_view::npos) {
    return Bad("no part opens with the boundary");
  }
  at += body.starts_with(delimiter) ? delimiter.size() : delimiter.size() + 2;
  std::vector<FormPart> parts;
  const std::string next_delimiter = "\r\n" + delimiter;
  while (true) {
    if (body.substr(at, 2) == "--") {
      // The closing delimiter: the body ends, or an epilogue follows on a
      // line of its own (else the boundary was only a prefix of a line).
      const std::string_view rest = body.substr(at + 2);
      if (!rest.empty() && !rest.starts_with("\r\n")) {
        return Bad("a boundary line is not followed by CRLF");
      }
      return parts;
    }
    if (body.substr(at, 2) != "\r\n") {
      return Bad("a boundary line is not followed by CRLF");
    }
    at += 2;
    const std::size_t head_end = body.find("\r\n\r\n", at);
    if (head_end == std::string_view::npos || head_end - at > 8192) {
      return Bad("a part's headers do not end (or exceed 8 KiB)");
    }
    FormPart part;
    std::string_view head = body.substr(at, head_end - at);
    bool disposition = false;
    while (!head.empty()) {
      const std::size_t eol = head.find("\r\n");
      const std::string_view line = head.substr(0, eol);
      head = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 2);
      const std::size_t colon = line.find(':');
      if (colon == std::string_view::npos) {
        return Bad("a part header without ':'");
      }
      const std::string name = AsciiLower(Trim(line.substr(0, colon)));
      const std::string_view value = Trim(line.substr(colon + 1));
      if (name == "content-disposition") {
        if (AsciiLower(Trim(value.substr(0, value.find(';')))) != "form-data") {
          return Bad("a part's Content-Disposition is not form-data");
        }
        disposition = true;
        part.name = Param(value, "name");
        part.filename = Param(value, "filename");
      } else if (name == "content-type") {
        part.content_type = std::string(value);
      }
    }
    if (!disposition || part.name.empty()) {
      return Bad("a part without a Content-Disposition name");
    }
    at = head_end + 4;
    const std::size_t end = body.find(next_delimiter, at);
    if (end == std::string_view::npos) {
      return Bad("the body ends inside part '" + part.name + "' (no closing boundary)");
    }
    part.data = std::string(body.substr(at, end - at));
    if (parts.size() == max_parts) {
      return Bad("more than " + std::to_string(max_parts) + " parts");
    }
    parts.push_back(std::move(part));
    at = end + next_delimiter.size();
  }
}

}  // namespace sluice::http
