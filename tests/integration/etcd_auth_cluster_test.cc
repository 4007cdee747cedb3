// A cluster on an etcd with auth on, as shipped (label etcd; a real etcd
// started by the test, skipped without /usr/bin/etcd): `sluice etcd-auth`
// makes a user per role, and every role runs as its own user over TLS with
// client certificates — the master and the orchestrator lead (the journal
// in etcd), the store node and the workers resolve them, a job runs — while
// a worker's user cannot lead as a master.
#include <httplib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "child_process.h"
#include "command_output.h"
#include "common/testing/eventually.h"
#include "discovery/testing/tls_etcd_test.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

class EtcdAuthClusterTest : public discovery::testing::TlsEtcdTest {
 protected:
  void SetUp() override {
    TlsEtcdTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    std::filesystem::create_directory(dir_ + "/pw");
    for (const char* user : {"root", "master", "orchestrator", "node", "worker"}) {
      const std::string path = dir_ + "/pw/" + user;
      std::ofstream(path) << "pw-" << user << "-0c41e9\n";
      ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
    }
  }
  std::vector<std::string> EtcdTls() const {
    return {"--etcd",      server_->url(), "--etcd-ca",  pki_.ca,
            "--etcd-cert", pki_.cert,      "--etcd-key", pki_.key};
  }
  // A role as etcd user `user` ("master"...); waits up to `banner_ms` for
  // its READY line; its stderr to `log` when given.
  std::unique_ptr<ChildProcess> Role(std::vector<std::string> args, const std::string& user,
                                     int banner_ms = 20000, const std::string& log = "") {
    std::vector<std::string> argv = {SLUICE_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const std::string& a : EtcdTls()) {
      argv.push_back(a);
    }
    for (const std::string& a :
         {std::string("--cluster"), std::string("t"), std::string("--etcd-user"),
          "sluice-t-" + user, std::string("--etcd-password-file"), dir_ + "/pw/" + user,
          std::string("--exit-on-stdin-eof")}) {
      argv.push_back(a);
    }
    return std::make_unique<ChildProcess>(argv, banner_ms, log);
  }
};

TEST_F(EtcdAuthClusterTest, EveryRoleRunsAsItsOwnEtcdUser) {
  std::string cmd = std::string(SLUICE_BIN) + " etcd-auth --cluster t --passwords " + dir_ + "/pw";
  for (const std::string& a : EtcdTls()) {
    cmd += " " + a;
  }
  int status = 0;
  std::string errors;
  std::string out = CommandOutputAndErrors(cmd, &status, &errors);
  ASSERT_EQ(status, 0) << out << errors;
  EXPECT_NE(out.find("--etcd-user sluice-t-ROLE"), std::string::npos) << out;
  // Again: it signs in as root now, and sets the same passwords.
  out = CommandOutputAndErrors(cmd, &status, &errors);
  ASSERT_EQ(status, 0) << out << errors;

  // A worker's user cannot lead as a master: it never serves.
  const std::string impostor_log = dir_ + "/impostor.log";
  auto impostor = Role({"master", "--metrics-port", "0"}, "worker", 3000, impostor_log);
  EXPECT_EQ(impostor->banner(), "") << "a worker's etcd user led the masters";

  auto master = Role({"master", "--metrics-port", "0"}, "master");
  ASSERT_EQ(master->Word(1), "master") << master->banner();
  auto node = Role({"store-node", "--memory", "64MiB"}, "node");
  ASSERT_EQ(node->Word(1), "store-node") << node->banner();
  auto orch = Role({"orchestrator", "--journal-in-etcd"}, "orchestrator");
  ASSERT_EQ(orch->Word(1), "orchestrator") << orch->banner();
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (const char* stage : {"encode", "denoise", "decode"}) {
    workers.push_back(Role({"worker", "--stage", stage}, "worker"));
    ASSERT_EQ(workers.back()->Word(1), "worker") << workers.back()->banner();
  }
  httplib::Client http("http://" + orch->Word(3));
  http.set_read_timeout(60, 0);
  auto r = http.Post("/v1/images/generations",
                     R"({"prompt":"a lighthouse","size":"64x64","steps":2})", "application/json");
  ASSERT_TRUE(r) << "no answer";
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_TRUE(json::parse(r->body, nullptr, false).contains("data")) << r->body;

  std::ifstream in(impostor_log);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("campaigning for /sluice/t/master/leader: PermissionDenied"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace sluice::testing
