// A throwaway PKI for TLS tests: a CA, a certificate it signs for
// 127.0.0.1 (used by servers and clients alike; named by its subject
// alternative name only, without a common name, which etcd's gateway
// refuses from clients once its auth is on), and an unrelated CA, made
// with the `openssl` command in `dir`.
#ifndef SLUICE_COMMON_TESTING_TEST_PKI_H_
#define SLUICE_COMMON_TESTING_TEST_PKI_H_

#include <cstdlib>
#include <string>

namespace sluice::testing {

struct Pki {
  std::string ca, cert, key, other_ca;  // PEM file paths.
};

// Writes the files into `dir` (which must exist); the paths are empty
// when `openssl` failed.
inline Pki MakePki(const std::string& dir) {
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string cmd =
      "cd " + dir + " && openssl req -x509" + ec +
      " -keyout ca.key -out ca.pem -days 1 -subj /CN=sluice-test-ca 2>/dev/null && "
      "openssl req -x509" +
      ec +
      " -keyout other.key -out other.pem -days 1 -subj /CN=another-ca 2>/dev/null && "
      "openssl req" +
      ec +
      " -keyout node.key -out node.csr -subj /O=sluice-test 2>/dev/null && "
      "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
      "openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out node.pem "
      "-days 1 -extfile san.ext 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    return {};
  }
  return {dir + "/ca.pem", dir + "/node.pem", dir + "/node.key", dir + "/other.pem"};
}

}  // namespace sluice::testing

#endif  // SLUICE_COMMON_TESTING_TEST_PKI_H_
