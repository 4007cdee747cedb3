#include "common/metrics_text.h"

#include <array>
#include <limits>

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

TEST(MetricsTextTest, FamiliesSamplesAndEscapedLabels) {
  MetricsText m;
  m.Counter("sluice_x_total", "Things done.", 3);
  m.Family("sluice_y_bytes", "Bytes per kind.", "gauge");
  m.Sample("sluice_y_bytes", {{"kind", "a\"b\\c\nd"}, {"stage", "denoise"}}, 1.5);
  m.Gauge("sluice_z", "Unbounded.", std::numeric_limits<double>::infinity());
  EXPECT_EQ(m.text(),
            "# HELP sluice_x_total Things done.\n# TYPE sluice_x_total counter\n"
            "sluice_x_total 3\n"
            "# HELP sluice_y_bytes Bytes per kind.\n# TYPE sluice_y_bytes gauge\n"
            "sluice_y_bytes{kind=\"a\\\"b\\\\c\\nd\",stage=\"denoise\"} 1.5\n"
            "# HELP sluice_z Unbounded.\n# TYPE sluice_z gauge\nsluice_z +Inf\n");
}

TEST(MetricsTextTest, AHistogramsBucketsAreCumulative) {
  MetricsText m;
  m.Family("sluice_run_seconds", "Run time.", "histogram");
  const std::array<double, 3> bounds{0.1, 1, 10};
  const std::array<std::uint64_t, 3> counts{2, 0, 3};
  m.Histogram("sluice_run_seconds", {{"stage", "decode"}}, bounds, counts, 6, 42.25);
  EXPECT_EQ(m.text(),
            "# HELP sluice_run_seconds Run time.\n# TYPE sluice_run_seconds histogram\n"
            "sluice_run_seconds_bucket{stage=\"decode\",le=\"0.1\"} 2\n"
            "sluice_run_seconds_bucket{stage=\"decode\",le=\"1\"} 2\n"
            "sluice_run_seconds_bucket{stage=\"decode\",le=\"10\"} 5\n"
            "sluice_run_seconds_bucket{stage=\"decode\",le=\"+Inf\"} 6\n"
            "sluice_run_seconds_sum{stage=\"decode\"} 42.25\n"
            "sluice_run_seconds_count{stage=\"decode\"} 6\n");
}

// OpenMetrics (what Prometheus asks for): a counter's family is named
// without _total, buckets carry their exemplars, the text ends with # EOF.
TEST(MetricsTextTest, OpenMetricsNamesCounterFamiliesAndCarriesExemplars) {
  MetricsText m(/*openmetrics=*/true);
  m.Counter("sluice_x_total", "Things done.", 3);
  m.Family("sluice_run_seconds", "Run time.", "histogram");
  const std::array<double, 2> bounds{0.1, 1};
  const std::array<std::uint64_t, 2> counts{1, 1};
  const std::array<MetricExemplar, 3> exemplars{MetricExemplar{"job_id", "job-a\"1", 0.05},
                                                MetricExemplar{"job_id", "", 0},
                                                MetricExemplar{"job_id", "job-b", 2.5}};
  m.Histogram("sluice_run_seconds", {{"stage", "decode"}}, bounds, counts, 3, 2.75, exemplars);
  EXPECT_STREQ(m.content_type(), "application/openmetrics-text; version=1.0.0; charset=utf-8");
  EXPECT_EQ(
      m.text(),
      "# HELP sluice_x Things done.\n# TYPE sluice_x counter\nsluice_x_total 3\n"
      "# HELP sluice_run_seconds Run time.\n# TYPE sluice_run_seconds histogram\n"
      "sluice_run_seconds_bucket{stage=\"decode\",le=\"0.1\"} 1 # {job_id=\"job-a\\\"1\"} 0.05\n"
      "sluice_run_seconds_bucket{stage=\"decode\",le=\"1\"} 2\n"
      "sluice_run_seconds_bucket{stage=\"decode\",le=\"+Inf\"} 3 # {job_id=\"job-b\"} 2.5\n"
      "sluice_run_seconds_sum{stage=\"decode\"} 2.75\n"
      "sluice_run_seconds_count{stage=\"decode\"} 3\n"
      "# EOF\n");
  // Prometheus text ignores exemplars.
  MetricsText text;
  text.Family("sluice_run_seconds", "Run time.", "histogram");
  text.Histogram("sluice_run_seconds", {}, bounds, counts, 3, 2.75, exemplars);
  EXPECT_EQ(text.text().find('#', 60), std::string::npos) << text.text();
}

}  // namespace
}  // namespace sluice::internal
