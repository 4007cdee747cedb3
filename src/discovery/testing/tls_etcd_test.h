// A test fixture with a real etcd serving TLS that requires client
// certificates (as shipped), on a throwaway PKI: the CA, a certificate it
// signed for 127.0.0.1 (served by etcd, presented by clients) and an
// unrelated CA. Skips without /usr/bin/etcd.
#ifndef SLUICE_DISCOVERY_TESTING_TLS_ETCD_TEST_H_
#define SLUICE_DISCOVERY_TESTING_TLS_ETCD_TEST_H_

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "common/testing/test_pki.h"
#include "discovery/testing/etcd_server.h"

namespace sluice::discovery::testing {

class TlsEtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::Available()) {
      GTEST_SKIP() << "no /usr/bin/etcd (Debian's etcd-server)";
    }
    char tmpl[] = "/tmp/sluice-etcd-tls-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    pki_ = sluice::testing::MakePki(dir_);
    ASSERT_FALSE(pki_.ca.empty()) << "openssl failed";
    ASSERT_EQ(::chmod(pki_.key.c_str(), 0600), 0);
    server_ = std::make_unique<EtcdServer>(EtcdServerTls{pki_.ca, pki_.cert, pki_.key}, As());
  }
  void TearDown() override {
    server_.reset();
    if (!dir_.empty()) {
      std::filesystem::remove_all(dir_);
    }
  }
  // A client's security: the CA and the certificate, as `user` when given.
  EtcdSecurity As(const std::string& user = "", const std::string& password = "") const {
    return {pki_.ca, pki_.cert, pki_.key, user, password};
  }

  std::string dir_;
  sluice::testing::Pki pki_;
  std::unique_ptr<EtcdServer> server_;
};

}  // namespace sluice::discovery::testing

#endif  // SLUICE_DISCOVERY_TESTING_TLS_ETCD_TEST_H_
