#include "discovery/etcd_client.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>

#include "sluice/security.h"

#include "common/base64.h"

namespace sluice::discovery {
namespace {

using nlohmann::json;

std::string Base64(std::string_view in) {
  return internal::Base64Encode(in);
}

Result<std::string> Unbase64(std::string_view in) {
  Result<std::string> out = internal::Base64Decode(in);
  if (!out.ok()) {
    return InternalError("etcd: a field is not base64 (" + std::string(out.status().message()) +
                         ")");
  }
  return out;
}

// etcd's JSON carries 64-bit numbers as strings ("7587899312372139781").
std::int64_t Int(const json& j, const char* field) {
  if (!j.is_object() || !j.contains(field)) {
    return 0;
  }
  const json& v = j[field];
  if (v.is_number_integer()) {
    return v.get<std::int64_t>();
  }
  std::int64_t out = 0;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    std::from_chars(s.data(), s.data() + s.size(), out);
  }
  return out;
}

Result<json> Parse(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return InternalError("etcd: an answer that is not a JSON object");
  }
  return j;
}

Result<std::vector<EtcdKv>> Kvs(const json& j) {
  std::vector<EtcdKv> out;
  if (!j.contains("kvs") || !j["kvs"].is_array()) {
    return out;
  }
  for (const json& kv : j["kvs"]) {
    EtcdKv e;
    SLUICE_ASSIGN_OR_RETURN(e.key, Unbase64(kv.value("key", "")));
    SLUICE_ASSIGN_OR_RETURN(e.value, Unbase64(kv.value("value", "")));
    e.lease = Int(kv, "lease");
    e.create_revision = Int(kv, "create_revision");
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> ParseEtcdEndpoints(std::string_view list) {
  static const std::regex kUrl(R"(https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5})");
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string url(list.substr(at, comma - at));
    if (!std::regex_match(url, kUrl)) {
      return InvalidArgumentError("etcd endpoint '" + url +
                                  "' is not http://HOST:PORT or https://HOST:PORT");
    }
    out.push_back(url);
    at = comma + 1;
  }
  return out;
}

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(std::vector<std::string> endpoints,
                                                       std::chrono::milliseconds timeout,
                                                       EtcdSecurity security) {
  if (endpoints.empty()) {
    return InvalidArgumentError("etcd: no endpoint");
  }
  const EtcdSecurity& s = security;
  const bool tls_files = !s.ca_file.empty() || !s.cert_file.empty() || !s.key_file.empty();
  for (const std::string& e : endpoints) {
    const bool https = e.rfind("https://", 0) == 0;
    if (https && s.ca_file.empty()) {
      return InvalidArgumentError("etcd endpoint " + e +
                                  " is https: it needs the CA of etcd's certificate (--etcd-ca)");
    }
    if (!https && tls_files) {
      return InvalidArgumentError("etcd endpoint " + e +
                                  " is plaintext http, yet TLS files are given: use https://");
    }
  }
  if (s.cert_file.empty() != s.key_file.empty()) {
    return InvalidArgumentError(
        "etcd: a client certificate needs its key and the reverse "
        "(--etcd-cert with --etcd-key)");
  }
  for (const std::string* f : {&s.ca_file, &s.cert_file}) {
    if (!f->empty() && ::access(f->c_str(), R_OK) != 0) {
      return InvalidArgumentError("etcd: cannot read " + *f);
    }
  }
  if (!s.key_file.empty()) {
    SLUICE_RETURN_IF_ERROR(CheckSecretFile("etcd client key", s.key_file));
  }
  if (!s.ca_file.empty()) {
    static std::once_flag ignore_sigpipe;
    std::call_once(ignore_sigpipe, [] { ::signal(SIGPIPE, SIG_IGN); });
  }
  if (s.user.empty() != s.password.empty()) {
    return InvalidArgumentError(
        "etcd: auth needs a user and a password (--etcd-user with "
        "--etcd-password-file)");
  }
  return std::unique_ptr<EtcdClient>(
      new EtcdClient(std::move(endpoints), timeout, std::move(security)));
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout,
                       EtcdSecurity security)
    : endpoints_(std::move(endpoints)), timeout_(timeout), security_(std::move(security)) {}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::PostLocked(std::size_t i, const std::string& path, const std::string& body,
                                   int* status, std::string* failure) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  if (!token_.empty() && path != "/v3/auth/authenticate") {
    req.set_header("Authorization", token_);
  }
  // The gateway ends an error's chunked body with trailers httplib cannot
  // parse (the exchange then fails as a read error): the status and the
  // body are taken as they arrive, before the trailers.
  int got = 0;
  std::string answer;
  req.response_handler = [&got](const httplib::Response& r) {
    got = r.status;
    return true;
  };
  req.content_receiver = [&answer](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
    answer.append(data, n);
    return answer.size() <= (std::size_t{4} << 20);
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool ok = clients_[i]->send(req, res, error);
  *status = ok ? res.status : got;
  if (*status == 0) {
    *failure = httplib::to_string(error);
    if (error == httplib::Error::SSLServerVerification) {
      *failure += " (etcd's certificate is not signed by --etcd-ca, or does not name " +
                  endpoints_[i] + ")";
    }
    return {};
  }
  return answer;
}

Status EtcdClient::AuthenticateLocked(std::size_t i) {
  int status = 0;
  std::string failure;
  const std::string body = PostLocked(
      i, "/v3/auth/authenticate",
      json{{"name", security_.user}, {"password", security_.password}}.dump(), &status, &failure);
  if (status == 0) {
    return UnavailableError("etcd " + endpoints_[i] + ": " + failure, FailureScope::kEndpoint);
  }
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (status != 200 || !j.is_object() || !j.contains("token") || !j["token"].is_string()) {
    return UnauthenticatedError("etcd " + endpoints_[i] + " refused user '" + security_.user +
                                "': HTTP " + std::to_string(status) + " " + body.substr(0, 200));
  }
  token_ = j["token"].get<std::string>();
  ++authentications_;
  return Status::Ok();
}

std::uint64_t EtcdClient::authentications() const {
  MutexLock lock(mu_);
  return authentications_;
}

Result<std::string> EtcdClient::Call(const std::string& path, const std::string& body) {
  MutexLock lock(mu_);
  if (clients_.empty()) {
    for (const std::string& e : endpoints_) {
      std::unique_ptr<httplib::Client> c =
          security_.cert_file.empty()
              ? std::make_unique<httplib::Client>(e)
              : std::make_unique<httplib::Client>(e, security_.cert_file, security_.key_file);
      if (!security_.ca_file.empty()) {
        c->set_ca_cert_path(security_.ca_file);
        c->enable_server_certificate_verification(true);
      }
      const auto s = std::chrono::duration_cast<std::chrono::seconds>(timeout_);
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(timeout_ - s);
      c->set_connection_timeout(s.count(), us.count());
      c->set_read_timeout(s.count(), us.count());
      c->set_write_timeout(s.count(), us.count());
      clients_.push_back(std::move(c));
    }
  }
  std::string last;
  for (std::size_t tried = 0; tried < clients_.size(); ++tried) {
    const std::size_t i = (current_ + tried) % clients_.size();
    if (!security_.user.empty() && token_.empty()) {
      if (Status s = AuthenticateLocked(i); !s.ok()) {
        if (s.code() != StatusCode::kUnavailable) {
          return s;
        }
        last = std::string(s.message());
        continue;
      }
    }
    int status = 0;
    std::string failure;
    std::string answer = PostLocked(i, path, body, &status, &failure);
    if (status == 401 && !security_.user.empty()) {
      // The token expired (or etcd restarted): once more with a new one.
      token_.clear();
      SLUICE_RETURN_IF_ERROR(AuthenticateLocked(i));
      answer = PostLocked(i, path, body, &status, &failure);
    }
    if (status == 200) {
      current_ = i;
      return answer;
    }
    if (status == 401 || status == 403) {
      return PermissionDeniedError(
          "etcd " + endpoints_[i] + path + " refused: HTTP " + std::to_string(status) + " " +
          answer.substr(0, 200) +
          (security_.user.empty() ? " (etcd has auth on: --etcd-user)" : ""));
    }
    if (status / 100 == 4) {
      // etcd refused the request itself: another member would too.
      return InvalidArgumentError("etcd " + endpoints_[i] + path + ": HTTP " +
                                  std::to_string(status) + " " + answer.substr(0, 200));
    }
    last = endpoints_[i] + ": " + (status != 0 ? "HTTP " + std::to_string(status) : failure);
  }
  return UnavailableError("etcd unreachable (" + last + ")", FailureScope::kEndpoint);
}

std::string EtcdBase64(std::string_view in) {
  return Base64(in);
}

std::string EtcdPrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

Result<std::string> EtcdClient::Post(const std::string& path, const std::string& body) {
  return Call(path, body);
}

Result<std::int64_t> EtcdClient::Grant(std::chrono::seconds ttl) {
  SLUICE_ASSIGN_OR_RETURN(
      std::string body,
      Call("/v3/lease/grant", json{{"TTL", std::max<std::int64_t>(1, ttl.count())}}.dump()));
  SLUICE_ASSIGN_OR_RETURN(json j, Parse(body));
  const std::int64_t id = Int(j, "ID");
  if (id == 0) {
    return InternalError("etcd: a lease grant without an id: " + body.substr(0, 200));
  }
  return id;
}

Status EtcdClient::KeepAlive(std::int64_t lease) {
  SLUICE_ASSIGN_OR_RETURN(std::string body,
                          Call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump()));
  SLUICE_ASSIGN_OR_RETURN(json j, Parse(body));
  const json& result = j.contains("result") ? j["result"] : j;
  if (Int(result, "TTL") <= 0) {
    return NotFoundError("etcd: lease " + std::to_string(lease) + " expired");
  }
  return Status::Ok();
}

Status EtcdClient::Revoke(std::int64_t lease) {
  // The gateway answers a revoke of a gone lease with an error body whose
  // chunked encoding carries trailers httplib cannot read: ask first.
  SLUICE_ASSIGN_OR_RETURN(std::string ttl,
                          Call("/v3/lease/timetolive", json{{"ID", std::to_string(lease)}}.dump()));
  SLUICE_ASSIGN_OR_RETURN(json j, Parse(ttl));
  if (Int(j, "TTL") < 0) {
    return Status::Ok();  // Gone already.
  }
  Result<std::string> r = Call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  if (!r.ok() && r.status().code() != StatusCode::kInvalidArgument) {
    return r.status();
  }
  return Status::Ok();
}

Status EtcdClient::Put(const std::string& key, const std::string& value, std::int64_t lease) {
  json req = {{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease != 0) {
    req["lease"] = std::to_string(lease);
  }
  return Call("/v3/kv/put", req.dump()).status();
}

Result<std::optional<EtcdKv>> EtcdClient::Get(const std::string& key) {
  SLUICE_ASSIGN_OR_RETURN(std::string body,
                          Call("/v3/kv/range", json{{"key", Base64(key)}}.dump()));
  SLUICE_ASSIGN_OR_RETURN(json j, Parse(body));
  SLUICE_ASSIGN_OR_RETURN(std::vector<EtcdKv> kvs, Kvs(j));
  if (kvs.empty()) {
    return std::optional<EtcdKv>();
  }
  return std::optional<EtcdKv>(std::move(kvs.front()));
}

Result<std::vector<EtcdKv>> EtcdClient::GetPrefix(const std::string& prefix, bool keys_only) {
  json req = {{"key", Base64(prefix)}, {"range_end", Base64(EtcdPrefixEnd(prefix))}};
  if (keys_only) {
    req["keys_only"] = true;
  }
  SLUICE_ASSIGN_OR_RETURN(std::string body, Call("/v3/kv/range", req.dump()));
  SLUICE_ASSIGN_OR_RETURN(json j, Parse(body));
  return Kvs(j);
}

Status EtcdClient::Delete(const std::string& key) {
  return Call("/v3/kv/deleterange", json{{"key", Base64(key)}}.dump()).status();
}

Result<bool> EtcdClient::CreateIfAbsent(const std::string& key, const std::string& value,
                                        std::int64_t lease) {
  json put = {{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease != 0) {
    put["lease"] = std::to_string(lease);
  }
  const json txn = {{"compare", json::array({{{"key", Base64(key)},
                                              {"target", "CREATE"},
                                              {"result", "EQUAL"},
                                              {"create_revision", "0"}}})},
                    {"success", json::array({{{"request_put", put}}})}};
  SLUICE_ASSIGN_OR_RETURN(std::string body, Call("/v3/kv/txn", txn.dump()));
  SLUICE_ASSIGN_OR_RETURN(json j, Parse(body));
  return j.value("succeeded", false);
}

Result<bool> EtcdClient::Txn(const std::vector<EtcdWrite>& writes, const std::string& fence_key,
                             std::int64_t fence_lease) {
  json ops = json::array();
  for (const EtcdWrite& w : writes) {
    switch (w.kind) {
      case EtcdWrite::Kind::kPut:
        ops.push_back({{"request_put", {{"key", Base64(w.key)}, {"value", Base64(w.value)}}}});
        break;
      case EtcdWrite::Kind::kDelete:
        ops.push_back({{"request_delete_range", {{"key", Base64(w.key)}}}});
        break;
      case EtcdWrite::Kind::kDeletePrefix:
        ops.push_back({{"request_delete_range",
                        {{"key", Base64(w.key)}, {"range_end", Base64(EtcdPrefixEnd(w.key))}}}});
        break;
    }
  }
  json txn = {{"success", std::move(ops)}};
  if (!fence_key.empty()) {
    txn["compare"] = json::array({{{"key", Base64(fence_key)},
                                   {"target", "LEASE"},
                                   {"result", "EQUAL"},
                                   {"lease", std::to_string(fence_lease)}}});
  }
  SLUICE_ASSIGN_OR_RETURN(std::string body, Call("/v3/kv/txn", txn.dump()));
  SLUICE_ASSIGN_OR_RETURN(json j, Parse(body));
  return j.value("succeeded", false);
}

}  // namespace sluice::discovery
