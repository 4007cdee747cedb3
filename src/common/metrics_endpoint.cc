#include "common/metrics_endpoint.h"

#include <httplib.h>

#include <thread>

#include "common/net.h"

namespace sluice::internal {

struct MetricsEndpoint::Server {
  httplib::Server http;
  std::thread thread;
};

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& role, const std::string& host, int port,
    std::function<std::string()> render) {
  if (port < 0 || port > 65535) {
    return InvalidArgumentError(role + ": the metrics port must be in 0..65535, not " +
                                std::to_string(port));
  }
  if (host.empty()) {
    return InvalidArgumentError(role + ": the metrics endpoint needs a host");
  }
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->server_ = std::make_unique<Server>();
  httplib::Server& http = e->server_->http;
  http.Get("/metrics",
           [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
             res.set_content(render(), "text/plain; version=0.0.4");
           });
  const int bound =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  HostPort hp;
  hp.host = host;
  hp.port = static_cast<std::uint16_t>(port);
  if (bound <= 0) {
    return UnavailableError(role + ": the metrics endpoint cannot listen on " + hp.ToString(),
                            FailureScope::kTransport);
  }
  hp.port = static_cast<std::uint16_t>(bound);
  e->endpoint_ = hp.ToString();
  e->server_->thread = std::thread([s = e->server_.get()] { s->http.listen_after_bind(); });
  return e;
}

MetricsEndpoint::~MetricsEndpoint() {
  if (server_ != nullptr && server_->thread.joinable()) {
    server_->http.stop();
    server_->thread.join();
  }
}

}  // namespace sluice::internal
