#include "sluice/security.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/log.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/security_keys.h"

namespace sluice {
namespace {

constexpr std::size_t kMinTokenBytes = 16;
constexpr std::size_t kMaxTokenBytes = 4096;
constexpr std::size_t kMaxPemBytes = 1 << 20;

struct Source {
  std::string path;
  std::string flag;  // How the caller named it: "--cluster-token" or the variable.
};

Source Pick(const std::string& path, const char* flag, const char* env) {
  if (!path.empty()) {
    return {path, flag};
  }
  const char* v = std::getenv(env);
  return v == nullptr || *v == '\0' ? Source{} : Source{v, env};
}

Result<std::string> ReadSmallFile(const Source& src, std::size_t max_bytes) {
  std::ifstream in(src.path, std::ios::binary);
  if (!in) {
    return InvalidArgumentError(src.flag + " " + src.path + ": cannot be read");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > max_bytes) {
    return InvalidArgumentError(src.flag + " " + src.path + ": larger than " +
                                std::to_string(max_bytes) + " bytes");
  }
  return text;
}

std::string_view Trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const std::size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) {
    return {};
  }
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

Result<std::string> ReadPem(const Source& src) {
  if (src.path.empty()) {
    return std::string();
  }
  SLUICE_ASSIGN_OR_RETURN(std::string pem, ReadSmallFile(src, kMaxPemBytes));
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return InvalidArgumentError(src.flag + " " + src.path + ": not a PEM file");
  }
  return pem;
}

bool IsLoopbackHost(std::string_view host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

Result<SecurityConfig> LoadSecurity(const SecurityFiles& files) {
  SecurityConfig out;
  const Source token = Pick(files.token_file, "--cluster-token", "SLUICE_CLUSTER_TOKEN_FILE");
  if (!token.path.empty()) {
    SLUICE_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(token, kMaxTokenBytes + 64));
    out.token = std::string(Trim(text));
    if (out.token.size() < kMinTokenBytes || out.token.size() > kMaxTokenBytes) {
      return InvalidArgumentError(
          token.flag + " " + token.path + ": the token must be " + std::to_string(kMinTokenBytes) +
          ".." + std::to_string(kMaxTokenBytes) + " bytes (got " +
          std::to_string(out.token.size()) + "); make one with `openssl rand -hex 32`");
    }
    SLUICE_RETURN_IF_ERROR(CheckSecretFile(token.flag, token.path));
  }
  const Source cred =
      Pick(files.role_credential_file, "--role-credential", "SLUICE_ROLE_CREDENTIAL_FILE");
  if (!cred.path.empty()) {
    if (!token.path.empty()) {
      return InvalidArgumentError(token.flag + " and " + cred.flag +
                                  " both given: a role holds the cluster token or its role "
                                  "credential, not both");
    }
    SLUICE_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(cred, 4096));
    SLUICE_ASSIGN_OR_RETURN(out.credential,
                            internal::ParseRoleCredential(text, cred.flag + " " + cred.path));
    SLUICE_RETURN_IF_ERROR(CheckSecretFile(cred.flag, cred.path));
  }
  const Source cert = Pick(files.tls_cert_file, "--tls-cert", "SLUICE_TLS_CERT_FILE");
  const Source key = Pick(files.tls_key_file, "--tls-key", "SLUICE_TLS_KEY_FILE");
  const Source ca = Pick(files.tls_ca_file, "--tls-ca", "SLUICE_TLS_CA_FILE");
  if (cert.path.empty() != key.path.empty()) {
    return InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  SLUICE_ASSIGN_OR_RETURN(out.tls_cert, ReadPem(cert));
  SLUICE_ASSIGN_OR_RETURN(out.tls_key, ReadPem(key));
  if (!key.path.empty()) {
    SLUICE_RETURN_IF_ERROR(CheckSecretFile(key.flag, key.path));
  }
  SLUICE_ASSIGN_OR_RETURN(out.tls_ca, ReadPem(ca));
  return out;
}

std::string TransferSecret(const SecurityConfig& security) {
  return security.token.empty()
             ? security.credential.transfer_key
             : internal::DeriveKey(security.token, internal::kTransferKeyPurpose);
}

Status CheckListenSecurity(std::string_view role, std::string_view listen,
                           const SecurityConfig& security, bool insecure, bool grpc) {
  SLUICE_ASSIGN_OR_RETURN(internal::HostPort hp, internal::ParseHostPort(listen, true));
  if (!security.open()) {
    if (!grpc || security.server_tls() || IsLoopbackHost(hp.host)) {
      return Status::Ok();
    }
    if (!insecure) {
      return InvalidArgumentError(
          std::string(role) + ": serving gRPC on " + std::string(listen) +
          " without TLS would send every call's contents (prompts, results, store keys) in "
          "the clear, open to reading and alteration on the network; pass --tls-cert and "
          "--tls-key (and --tls-ca), or --insecure to serve plaintext anyway");
    }
    SLUICE_LOG(warn, "{}: serving gRPC on {} without TLS (--insecure): calls travel in the clear",
               role, listen);
    return Status::Ok();
  }
  if (!IsLoopbackHost(hp.host) && !insecure) {
    return InvalidArgumentError(std::string(role) + ": listening on " + std::string(listen) +
                                " without a cluster credential would let any host on the "
                                "network in; pass --cluster-token FILE (the same on every "
                                "host), or --insecure to run an open cluster anyway");
  }
  SLUICE_LOG(warn,
             "{}: the cluster is open (no --cluster-token): any process that reaches {} can "
             "join it, take its jobs and read its payloads",
             role, listen);
  return Status::Ok();
}

Status CheckSecretFile(std::string_view what, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return InvalidArgumentError(std::string(what) + " " + path + ": cannot be read");
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return InvalidArgumentError(std::string(what) + " " + path + ": open to other users (mode " +
                                mode + "); chmod 600 it");
  }
  return Status::Ok();
}

Status CheckHttpListenSecurity(std::string_view role, std::string_view listen, bool has_api_keys,
                               bool insecure) {
  SLUICE_ASSIGN_OR_RETURN(internal::HostPort hp, internal::ParseHostPort(listen, true));
  if (has_api_keys || IsLoopbackHost(hp.host)) {
    return Status::Ok();
  }
  if (!insecure) {
    return InvalidArgumentError(std::string(role) + ": serving the HTTP API on " +
                                std::string(listen) +
                                " without API keys would let anyone who reaches it submit, read "
                                "and cancel any job; pass --api-keys FILE, or --insecure to "
                                "serve an open API anyway");
  }
  SLUICE_LOG(warn, "{}: serving an open HTTP API on {} (--insecure): no API keys", role, listen);
  return Status::Ok();
}

namespace internal {

std::array<std::uint8_t, 32> Hmac(std::string_view key, std::string_view data) {
  std::array<std::uint8_t, 32> mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac.data(), &len);
  return mac;
}

KeyedHmac::KeyedHmac(std::string_view key) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (mac == nullptr) {
    return;
  }
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  EVP_MAC_free(mac);  // The context holds its own reference.
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_END};
  if (ctx != nullptr && EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(key.data()),
                                     key.size(), params) != 1) {
    EVP_MAC_CTX_free(ctx);
    return;
  }
  ctx_.reset(ctx);
}

void KeyedHmac::Free::operator()(void* ctx) const {
  EVP_MAC_CTX_free(static_cast<EVP_MAC_CTX*>(ctx));
}

bool KeyedHmac::Compute(std::initializer_list<std::string_view> parts,
                        std::array<std::uint8_t, 32>* out) const {
  auto* ctx = static_cast<EVP_MAC_CTX*>(ctx_.get());
  if (ctx == nullptr || EVP_MAC_init(ctx, nullptr, 0, nullptr) != 1) {  // Same key again.
    return false;
  }
  for (std::string_view p : parts) {
    if (!p.empty() &&
        EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(p.data()), p.size()) != 1) {
      return false;
    }
  }
  std::size_t len = 0;
  return EVP_MAC_final(ctx, out->data(), &len, out->size()) == 1 && len == out->size();
}

std::string LowerHex(const std::uint8_t* p, std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[p[i] >> 4];
    out[2 * i + 1] = kHex[p[i] & 15];
  }
  return out;
}

std::string DeriveKey(std::string_view token, std::string_view purpose) {
  if (token.empty()) {
    return std::string();
  }
  const std::array<std::uint8_t, 32> mac = Hmac(token, "sluice-v1/" + std::string(purpose));
  return LowerHex(mac.data(), mac.size());
}

bool SecureEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void RefusalLog::Refused(std::string_view peer, std::string_view why) {
  count_.fetch_add(1, std::memory_order_relaxed);
  MutexLock lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (last_ != std::chrono::steady_clock::time_point{} && now - last_ < std::chrono::seconds(1)) {
    ++unlogged_;
    return;
  }
  SLUICE_LOG(warn, "{}: refused {}: {} ({} more refused since the last such line)", face_, peer,
             why, unlogged_);
  last_ = now;
  unlogged_ = 0;
}

}  // namespace internal
}  // namespace sluice
