// Routes requests by method and path pattern to handlers. Patterns are
// literal segments and `{name}` segments, each matching one non-empty path
// segment ("/v1/jobs/{id}/events"); matched segments become
// Request::params in order.
#ifndef SLUICE_HTTP_ROUTER_H_
#define SLUICE_HTTP_ROUTER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/message.h"

namespace sluice::http {

class Exchange;

// A handler runs on the connection's strand (an I/O thread) and must not
// block: it answers through `exchange` now or later (see Exchange), and
// hands blocking work to Exchange::RunBlocking.
using Handler = std::function<void(Request& request, std::shared_ptr<Exchange> exchange)>;

// A route's check of a request from its head alone (method, target,
// headers; `head.body` is empty), run before the body is read: a response
// refuses the request (the connection closes after it, its body unread);
// nullopt lets it through. Runs on an I/O thread; must not block. The
// handler still sees every request, gated or not (a body that arrived with
// its head is not gated first), so the check belongs in both.
using Gate = std::function<std::optional<Response>(const Request& head)>;

class Router {
 public:
  // Adds a route. A later route with the same method and pattern replaces
  // nothing: the first added wins. Not thread-safe; build the router
  // before the server starts. `gate` (optional) checks a request's head
  // before its body is read (an API key: 401 without reading 16 MiB).
  void Add(std::string_view method, std::string_view pattern, Handler handler, Gate gate = {});

  struct Match {
    const Handler* handler = nullptr;  // Null: no route for this method.
    const Gate* gate = nullptr;        // The route's gate; null: none.
    std::vector<std::string> params;
    // Methods that have a route for this path (for 405's Allow and CORS
    // preflights); empty: no route matches the path at all (404).
    std::vector<std::string> allowed;
  };
  Match Find(std::string_view method, std::string_view path) const;

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;  // "{...}" segments match anything.
    Handler handler;
    Gate gate;
  };
  std::vector<Route> routes_;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_ROUTER_H_
