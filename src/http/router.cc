#include "http/router.h"

#include <algorithm>

namespace sluice::http {
namespace {

// "/a/b/" -> {"a", "b", ""}: a trailing slash is a segment of its own, so
// "/v1/models/" does not match "/v1/models".
std::vector<std::string_view> Split(std::string_view path) {
  std::vector<std::string_view> out;
  if (path.starts_with('/')) {
    path.remove_prefix(1);
  }
  while (true) {
    const std::size_t slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) {
      return out;
    }
    path.remove_prefix(slash + 1);
  }
}

bool IsParam(std::string_view segment) {
  return segment.size() >= 2 && segment.front() == '{' && segment.back() == '}';
}

}  // namespace

void Router::Add(std::string_view method, std::string_view pattern, Handler handler, Gate gate) {
  Route r;
  r.method = std::string(method);
  for (std::string_view s : Split(pattern)) {
    r.segments.emplace_back(s);
  }
  r.handler = std::move(handler);
  r.gate = std::move(gate);
  routes_.push_back(std::move(r));
}

Router::Match Router::Find(std::string_view method, std::string_view path) const {
  Match m;
  const std::vector<std::string_view> parts = Split(path);
  for (const Route& r : routes_) {
    if (r.segments.size() != parts.size()) {
      continue;
    }
    std::vector<std::string> params;
    bool ok = true;
    for (std::size_t i = 0; i < parts.size() && ok; ++i) {
      if (IsParam(r.segments[i])) {
        ok = !parts[i].empty();
        params.emplace_back(parts[i]);
      } else {
        ok = r.segments[i] == parts[i];
      }
    }
    if (!ok) {
      continue;
    }
    if (std::find(m.allowed.begin(), m.allowed.end(), r.method) == m.allowed.end()) {
      m.allowed.push_back(r.method);
    }
    if (m.handler == nullptr && r.method == method) {
      m.handler = &r.handler;
      m.gate = r.gate ? &r.gate : nullptr;
      m.params = std::move(params);
    }
  }
  return m;
}

}  // namespace sluice::http
