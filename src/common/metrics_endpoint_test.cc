#include "common/metrics_endpoint.h"

#include <httplib.h>

#include <atomic>
#include <string>

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

TEST(MetricsEndpointTest, ServesWhatRenderGivesAtMetrics) {
  std::atomic<int> scrapes{0};
  auto e = MetricsEndpoint::Start("test", "127.0.0.1", 0, [&] {
    ++scrapes;
    return std::string("sluice_test_up 1\n");
  });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const std::string ep = (*e)->endpoint();
  httplib::Client c("127.0.0.1", std::stoi(ep.substr(ep.rfind(':') + 1)));
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "sluice_test_up 1\n");
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4");
  EXPECT_EQ(scrapes.load(), 1);
}

// A role that can write OpenMetrics gets it when the scraper asks for it
// (Prometheus's Accept names it); anyone else gets Prometheus text, and a
// text-only role never answers OpenMetrics.
TEST(MetricsEndpointTest, OpenMetricsOnlyWhenAskedForAndOffered) {
  auto e = MetricsEndpoint::Start(
      "test", "127.0.0.1", 0, [](bool om) { return std::string(om ? "om\n# EOF\n" : "text\n"); });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const std::string ep = (*e)->endpoint();
  httplib::Client c("127.0.0.1", std::stoi(ep.substr(ep.rfind(':') + 1)));
  auto plain = c.Get("/metrics");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->body, "text\n");
  EXPECT_EQ(plain->get_header_value("Content-Type"), "text/plain; version=0.0.4");
  const httplib::Headers asks = {
      {"Accept",
       "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
       "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"}};
  auto om = c.Get("/metrics", asks);
  ASSERT_TRUE(om);
  EXPECT_EQ(om->body, "om\n# EOF\n");
  EXPECT_EQ(om->get_header_value("Content-Type"),
            "application/openmetrics-text; version=1.0.0; charset=utf-8");

  auto text_only =
      MetricsEndpoint::Start("test", "127.0.0.1", 0, [] { return std::string("text\n"); });
  ASSERT_TRUE(text_only.ok());
  const std::string ep2 = (*text_only)->endpoint();
  httplib::Client c2("127.0.0.1", std::stoi(ep2.substr(ep2.rfind(':') + 1)));
  auto res = c2.Get("/metrics", asks);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4");
}

// Stopped at once after starting: the stop is never missed (a stop before
// the listen loop began used to leave the destructor waiting forever).
TEST(MetricsEndpointTest, StoppingRightAfterStartingReturns) {
  for (int i = 0; i < 200; ++i) {
    auto e = MetricsEndpoint::Start("test", "127.0.0.1", 0, [] { return std::string(); });
    ASSERT_TRUE(e.ok()) << e.status().ToString();
  }
}

TEST(MetricsEndpointTest, ABadOrTakenPortIsRefusedByName) {
  auto render = [] { return std::string(); };
  for (int port : {-1, 65536}) {
    auto bad = MetricsEndpoint::Start("sluice worker", "127.0.0.1", port, render);
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << port;
    EXPECT_NE(bad.status().message().find("sluice worker: the metrics port must be in 0..65535"),
              std::string_view::npos)
        << bad.status().ToString();
  }
  auto first = MetricsEndpoint::Start("test", "127.0.0.1", 0, render);
  ASSERT_TRUE(first.ok());
  const std::string ep = (*first)->endpoint();
  auto taken = MetricsEndpoint::Start("sluice store-node", "127.0.0.1",
                                      std::stoi(ep.substr(ep.rfind(':') + 1)), render);
  EXPECT_EQ(taken.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(taken.status().message().find("sluice store-node: the metrics endpoint cannot listen"),
            std::string_view::npos)
      << taken.status().ToString();
}

}  // namespace
}  // namespace sluice::internal
