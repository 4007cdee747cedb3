// Prometheus text exposition (format 0.0.4) for every role's /metrics, or
// OpenMetrics 1.0 when the scraper asks for it (what carries exemplars):
// one writer, so names, label escaping and histogram layout agree across
// the master, the orchestrator, workers and store nodes. Metric names
// follow `sluice_<role>_<what>[_total|_seconds|_bytes]`.
#ifndef SLUICE_COMMON_METRICS_TEXT_H_
#define SLUICE_COMMON_METRICS_TEXT_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::internal {

using MetricLabels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

// The Content-Type of an exposition in OpenMetrics or Prometheus text.
inline const char* MetricsContentType(bool openmetrics) {
  return openmetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                     : "text/plain; version=0.0.4";
}
// Whether a scrape's Accept header asks for OpenMetrics (Prometheus's does).
inline bool WantsOpenMetrics(std::string_view accept) {
  return accept.find("application/openmetrics-text") != std::string_view::npos;
}

// One observation a histogram bucket points at (OpenMetrics exemplars):
// which job it was (`label`="`value`") and what it measured. An empty
// value: none.
struct MetricExemplar {
  std::string_view label;
  std::string_view value;
  double observed = 0;
};

class MetricsText {
 public:
  // `openmetrics`: OpenMetrics 1.0 (a counter family's name without its
  // `_total`, exemplars, a final `# EOF`); else Prometheus text 0.0.4.
  explicit MetricsText(bool openmetrics = false) : openmetrics_(openmetrics) {}

  // Starts a family: its HELP and TYPE lines ("counter", "gauge",
  // "histogram"). Samples of it follow.
  void Family(std::string_view name, std::string_view help, std::string_view type);
  // One sample of the family started last. Label values are escaped (\\, ",
  // newline); names are the caller's constants.
  void Sample(std::string_view name, MetricLabels labels, double value);
  // A family of one unlabelled sample.
  void Counter(std::string_view name, std::string_view help, double value);
  void Gauge(std::string_view name, std::string_view help, double value);
  // One histogram's samples (after Family(name, ..., "histogram")):
  // `counts[i]` observations at most `bounds[i]` (not cumulative), `count`
  // in all (those above the last bound included), their `sum`.
  // `exemplars` (OpenMetrics only; empty: none): one per bucket, the +Inf
  // bucket last (bounds.size() + 1).
  void Histogram(std::string_view name, MetricLabels labels, std::span<const double> bounds,
                 std::span<const std::uint64_t> counts, std::uint64_t count, double sum,
                 std::span<const MetricExemplar> exemplars = {});

  // The exposition so far (OpenMetrics: ended by `# EOF`).
  std::string text() const { return openmetrics_ ? out_ + "# EOF\n" : out_; }
  // Its Content-Type.
  const char* content_type() const { return MetricsContentType(openmetrics_); }

 private:
  void Line(std::string_view name, std::string_view suffix, MetricLabels labels,
            std::string_view extra_label, std::string_view extra_value, double value,
            const MetricExemplar* exemplar = nullptr);

  bool openmetrics_;
  std::string out_;
};

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_METRICS_TEXT_H_
