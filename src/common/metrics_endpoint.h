// A role's Prometheus endpoint: GET /metrics on its own port, answered with
// what `render` gives (common/metrics_text.h) on the endpoint's thread.
#ifndef SLUICE_COMMON_METRICS_ENDPOINT_H_
#define SLUICE_COMMON_METRICS_ENDPOINT_H_

#include <functional>
#include <memory>
#include <string>

#include "sluice/status.h"

namespace sluice::internal {

class MetricsEndpoint {
 public:
  // Listens on `host` (an IP address or name) at `port` (0 picks one) and
  // serves `render()` at /metrics; `render` is called on the endpoint's
  // thread for each scrape and must be thread-safe. `role` names the
  // process in errors. Errors: kInvalidArgument (port outside 0..65535,
  // empty host), kUnavailable (cannot listen there).
  static Result<std::unique_ptr<MetricsEndpoint>> Start(const std::string& role,
                                                        const std::string& host, int port,
                                                        std::function<std::string()> render);
  // As above, for a role that can also write OpenMetrics (exemplars): a
  // scrape whose Accept names application/openmetrics-text (Prometheus
  // asks for it) gets `render(true)`, served as OpenMetrics; any other
  // gets `render(false)`, Prometheus text 0.0.4.
  static Result<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& role, const std::string& host, int port,
      std::function<std::string(bool openmetrics)> render);
  // Stops serving (a scrape in progress ends first).
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // "host:port" as bound.
  const std::string& endpoint() const { return endpoint_; }

 private:
  struct Server;
  MetricsEndpoint() = default;
  static Result<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& role, const std::string& host, int port,
      std::function<std::string(bool openmetrics)> render, bool openmetrics);
  std::unique_ptr<Server> server_;
  std::string endpoint_;
};

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_METRICS_ENDPOINT_H_
