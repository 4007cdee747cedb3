// The orchestrator with its journal in etcd (label etcd; skipped without
// Debian's etcd-server): concurrent clients' submissions are journaled
// outside the orchestrator's lock, and the journal holds exactly the jobs
// it accepted.
#include <httplib.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/orchestrator/server.h"

#include "discovery/etcd_client.h"
#include "discovery/testing/etcd_server.h"
#include "orchestrator/service/etcd_journal.h"
#include "orchestrator_fixture.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

TEST_F(OrchestratorTest, ConcurrentSubmissionsAreJournaledExactlyAsAccepted) {
  if (!discovery::testing::EtcdServer::Available()) {
    GTEST_SKIP() << "no /usr/bin/etcd (Debian's etcd-server)";
  }
  discovery::testing::EtcdServer etcd;
  const std::string prefix = "/sluice/t/orchestrator/journal/";
  configure_ = [&](OrchestratorConfig& c) {
    c.journal_etcd.endpoints = etcd.url();
    c.journal_etcd.prefix = prefix;
  };
  constexpr std::size_t kQueue = 24;
  Start(kQueue);
  // Eight clients at once, ten submissions each, no workers: past the
  // queue's bound every submission is refused, and none of those may stay
  // in the journal (a standby would run it).
  std::mutex mu;
  std::set<std::string> accepted;
  int limited = 0, other = 0;
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      httplib::Client http("http://" + server_->http_endpoint());
      http.set_read_timeout(30, 0);
      for (int i = 0; i < 10; ++i) {
        const json body = {{"prompt", "lantern " + std::to_string(t * 10 + i)}, {"async", true}};
        auto r = http.Post("/v1/images/generations", body.dump(), "application/json");
        const json j = r ? json::parse(r->body, nullptr, false) : json();
        std::lock_guard<std::mutex> lock(mu);
        if (r && r->status == 202 && j.is_object() && j.contains("id")) {
          accepted.insert(j["id"].get<std::string>());
        } else if (r && r->status == 429) {
          ++limited;
        } else {
          ++other;
        }
      }
    });
  }
  for (std::thread& c : clients) {
    c.join();
  }
  EXPECT_EQ(accepted.size(), kQueue);
  EXPECT_EQ(limited, static_cast<int>(80 - kQueue));
  EXPECT_EQ(other, 0);
  server_.reset();  // Its journal's queued writes land first.

  auto client = discovery::EtcdClient::Create({etcd.url()}, 2000ms);
  ASSERT_TRUE(client.ok());
  auto journal = orchestrator::EtcdJournal::Open(client->get(), {prefix, "", 0});
  ASSERT_TRUE(journal.ok()) << journal.status().ToString();
  auto unfinished = (*journal)->Unfinished();
  ASSERT_TRUE(unfinished.ok()) << unfinished.status().ToString();
  std::set<std::string> journaled;
  for (const auto& job : *unfinished) {
    journaled.insert(job.request.name);
  }
  EXPECT_EQ(journaled, accepted) << "the journal holds exactly the accepted jobs";
}

}  // namespace
}  // namespace sluice::testing
