#include "discovery/etcd_client.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <charconv>
#include <nlohmann/json.hpp>
#include <regex>

namespace sluice::discovery {
namespace {

using nlohmann::json;

std::string Base64(std::string_view in) {
  std::string out(4 * ((in.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

Result<std::string> Unbase64(std::string_view in) {
  if (in.size() % 4 != 0) {
    return InternalError("etcd: a base64 field of " + std::to_string(in.size()) + " characters");
  }
  std::string out(in.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0) {
    return InternalError("etcd: a field is not base64");
  }
  std::size_t pad = 0;
  for (std::size_t i = in.size(); i > 0 && in[i - 1] == '='; --i) {
    ++pad;
  }
  out.resize(static_cast<std::size_t>(n) - pad);
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

// The end of the range of keys starting with `prefix`: the prefix with its
// last byte below 0xff incremented ("\0" for all keys when there is none).
std::string PrefixEnd(std::string prefix) {
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

}  // namespace

Result<std::vector<std::string>> ParseEtcdEndpoints(std::string_view list) {
  static const std::regex kUrl(R"(http://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5})");
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string url(list.substr(at, comma - at));
    if (!std::regex_match(url, kUrl)) {
      return InvalidArgumentError("etcd endpoint '" + url + "' is not http://HOST:PORT");
    }
    out.push_back(url);
    at = comma + 1;
  }
  return out;
}

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(std::vector<std::string> endpoints,
                                                       std::chrono::milliseconds timeout) {
  if (endpoints.empty()) {
    return InvalidArgumentError("etcd: no endpoint");
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(endpoints), timeout));
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout)
    : endpoints_(std::move(endpoints)), timeout_(timeout) {}

EtcdClient::~EtcdClient() = default;

Result<std::string> EtcdClient::Call(const std::string& path, const std::string& body) {
  MutexLock lock(mu_);
  if (clients_.empty()) {
    for (const std::string& e : endpoints_) {
      auto c = std::make_unique<httplib::Client>(e);
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
    auto r = clients_[i]->Post(path, body, "application/json");
    if (r && r->status == 200) {
      current_ = i;
      return r->body;
    }
    if (r && r->status / 100 == 4) {
      // etcd refused the request itself: another member would too.
      return InvalidArgumentError("etcd " + endpoints_[i] + path + ": HTTP " +
                                  std::to_string(r->status) + " " + r->body.substr(0, 200));
    }
    last = endpoints_[i] + ": " +
           (r ? "HTTP " + std::to_string(r->status) : httplib::to_string(r.error()));
  }
  return UnavailableError("etcd unreachable (" + last + ")", FailureScope::kEndpoint);
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
  json req = {{"key", Base64(prefix)}, {"range_end", Base64(PrefixEnd(prefix))}};
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
                        {{"key", Base64(w.key)}, {"range_end", Base64(PrefixEnd(w.key))}}}});
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
