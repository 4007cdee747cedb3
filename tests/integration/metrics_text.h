// Reading one value of a sluice process's Prometheus /metrics in tests.
#ifndef SLUICE_TESTS_INTEGRATION_METRICS_TEXT_H_
#define SLUICE_TESTS_INTEGRATION_METRICS_TEXT_H_

#include <httplib.h>

#include <string>

namespace sluice::testing {

// The value of the unlabelled metric `name` served at `metrics_ep`
// ("host:port"); -1 when the endpoint does not answer 200 within 2 s or
// has no such metric.
inline double MetricValue(const std::string& metrics_ep, const std::string& name) {
  httplib::Client http("http://" + metrics_ep);
  http.set_connection_timeout(2, 0);
  auto res = http.Get("/metrics");
  if (!res || res->status != 200) {
    return -1;
  }
  const std::size_t at = res->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(res->body.substr(at + name.size() + 2));
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_INTEGRATION_METRICS_TEXT_H_
