#include "orchestrator/service/http_console.h"

#include <nlohmann/json.hpp>
#include <string>

#include "orchestrator/console/console_files.h"
#include "orchestrator/service/http_views.h"

namespace sluice::orchestrator {
namespace {

using http::Exchange;
using http::Request;
using http::Response;
using ExchangePtr = std::shared_ptr<Exchange>;

// The page loads only its own script and style, talks only to this
// server, and shows images and videos it made into blob: URLs (previews
// arrive as data: URLs).
constexpr const char* kPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' blob: data:; media-src 'self' blob:; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'none'";

Response FileResponse(const ConsoleFile& f) {
  Response r;
  r.content_type = std::string(f.type);
  r.body = std::string(f.body);
  r.headers = {{"Content-Security-Policy", kPolicy},
               {"X-Content-Type-Options", "nosniff"},
               {"Cache-Control", "no-cache"}};
  return r;
}

// The cluster's view, sent whenever it changed since the last one sent;
// looked at every `period` on the connection's strand.
class ClusterFeed : public std::enable_shared_from_this<ClusterFeed> {
 public:
  ClusterFeed(OrchestratorState& state, ExchangePtr ex, std::chrono::milliseconds period)
      : state_(state), ex_(std::move(ex)), period_(period) {}

  void Start() {
    auto self = shared_from_this();
    ex_->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}, ": keep-alive\n\n");
    ex_->OnClose([self] { self->stopped_ = true; });
    ex_->Post([self] { self->Pump(); });
  }

 private:
  void Pump() {
    if (stopped_) {
      return;
    }
    std::string now =
        ClusterJson(state_.Stats()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (now != last_) {
      ex_->Send("event: cluster\ndata: " + now + "\n\n");
      last_ = std::move(now);
    }
    auto self = shared_from_this();
    ex_->After(period_, [self] { self->Pump(); });
  }

  OrchestratorState& state_;
  ExchangePtr ex_;
  std::chrono::milliseconds period_;
  std::string last_;
  bool stopped_ = false;  // On the strand only.
};

}  // namespace

void InstallConsoleFiles(http::Router& router) {
  auto page = [](Request&, ExchangePtr ex) {
    ex->Respond(FileResponse(*FindConsoleFile("index.html")));
  };
  router.Add("GET", "/console", page);
  router.Add("GET", "/console/", page);
  router.Add("GET", "/console/{file}", [](Request& req, ExchangePtr ex) {
    const ConsoleFile* f = FindConsoleFile(req.params[0]);
    if (f == nullptr) {
      return ex->Respond(http::ErrorResponse(404, "invalid_request_error",
                                             "the console has no file " + req.params[0], "path",
                                             "not_found"));
    }
    ex->Respond(FileResponse(*f));
  });
}

void StreamCluster(OrchestratorState& state, std::shared_ptr<http::Exchange> ex,
                   std::chrono::milliseconds period) {
  std::make_shared<ClusterFeed>(state, std::move(ex), period)->Start();
}

}  // namespace sluice::orchestrator
