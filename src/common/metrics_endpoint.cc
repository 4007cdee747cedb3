#include "common/metrics_endpoint.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/metrics_text.h"
#include "common/net.h"

namespace sluice::internal {

struct MetricsEndpoint::Server {
  httplib::Server http;
  std::thread thread;
  std::atomic<bool> ended{false};  // listen_after_bind returned.
};

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& role, const std::string& host, int port,
    std::function<std::string()> render) {
  return Start(role, host, port,
               std::function<std::string(bool)>([render](bool) { return render(); }),
               /*openmetrics=*/false);
}

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& role, const std::string& host, int port,
    std::function<std::string(bool openmetrics)> render) {
  return Start(role, host, port, std::move(render), /*openmetrics=*/true);
}

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& role, const std::string& host, int port,
    std::function<std::string(bool openmetrics)> render, bool openmetrics) {
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
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which two
  // roles given one --metrics-port would share it and split its scrapes.
  http.set_socket_options([](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http.Get("/metrics", [render = std::move(render), openmetrics](const httplib::Request& req,
                                                                 httplib::Response& res) {
    const bool om = openmetrics && WantsOpenMetrics(req.get_header_value("Accept"));
    res.set_content(render(om), MetricsContentType(om));
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
  e->server_->thread = std::thread([s = e->server_.get()] {
    s->http.listen_after_bind();
    s->ended = true;
  });
  // Serving before it is handed out: a stop() before the listen loop began
  // would be missed, and the destructor would wait for the loop forever.
  while (!http.is_running()) {
    if (e->server_->ended) {
      return UnavailableError(
          role + ": the metrics endpoint on " + e->endpoint_ + " stopped before serving",
          FailureScope::kTransport);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return e;
}

MetricsEndpoint::~MetricsEndpoint() {
  if (server_ != nullptr && server_->thread.joinable()) {
    server_->http.stop();
    server_->thread.join();
  }
}

}  // namespace sluice::internal
