// Starts an embedded deployment (`sluice serve` in-process) on a free HTTP
// port for a test, or fails the test and returns null.
#ifndef SLUICE_TESTS_INTEGRATION_EMBEDDED_START_H_
#define SLUICE_TESTS_INTEGRATION_EMBEDDED_START_H_

#include <memory>

#include <gtest/gtest.h>

#include "sluice/serve/embedded.h"

namespace sluice::testing {

inline std::unique_ptr<EmbeddedCluster> StartEmbedded(EmbeddedConfig c) {
  c.http_listen = "127.0.0.1:0";
  auto cluster = EmbeddedCluster::Start(c);
  EXPECT_TRUE(cluster.ok()) << cluster.status().ToString();
  return cluster.ok() ? std::move(*cluster) : nullptr;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_INTEGRATION_EMBEDDED_START_H_
