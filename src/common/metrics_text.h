// Prometheus text exposition (format 0.0.4) for every role's /metrics: one
// writer, so names, label escaping and histogram layout agree across the
// master, the orchestrator, workers and store nodes. Metric names follow
// `sluice_<role>_<what>[_total|_seconds|_bytes]`.
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

class MetricsText {
 public:
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
  void Histogram(std::string_view name, MetricLabels labels, std::span<const double> bounds,
                 std::span<const std::uint64_t> counts, std::uint64_t count, double sum);

  const std::string& text() const { return out_; }

 private:
  void Line(std::string_view name, std::string_view suffix, MetricLabels labels,
            std::string_view extra_label, std::string_view extra_value, double value);

  std::string out_;
};

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_METRICS_TEXT_H_
