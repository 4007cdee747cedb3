// A client of etcd's v3 API through its JSON gateway (POST /v3/...; keys
// and values base64 in the JSON), over plain HTTP with cpp-httplib. Chosen
// over the gRPC API: the gateway is part of every etcd since 3.3 (Debian
// ships 3.4), needs no generated code or second protobuf tree, and the
// calls sluice makes (leases, puts, ranges, one compare-and-put) are few
// and small; a watch is replaced by polling at the election's pace.
// Thread-safe: calls are serialized.
#ifndef SLUICE_DISCOVERY_ETCD_CLIENT_H_
#define SLUICE_DISCOVERY_ETCD_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

#include "common/mutex.h"

namespace httplib {
class Client;
}

namespace sluice::discovery {

struct EtcdKv {
  std::string key;
  std::string value;
  std::int64_t lease = 0;  // 0: none.
  std::int64_t create_revision = 0;
};

// One write of a transaction (EtcdClient::Txn).
struct EtcdWrite {
  enum class Kind : std::uint8_t { kPut, kDelete, kDeletePrefix };
  Kind kind = Kind::kPut;
  std::string key;    // kDeletePrefix: every key starting with it.
  std::string value;  // kPut only.
};

// "http://host:port[,http://host:port...]" to its URLs. Errors:
// kInvalidArgument naming the bad one (only http://host:port is accepted).
Result<std::vector<std::string>> ParseEtcdEndpoints(std::string_view list);

class EtcdClient {
 public:
  // `endpoints`: URLs as ParseEtcdEndpoints gives them; a call goes to the
  // one that answered last and moves on to the next when it does not.
  // `timeout` bounds each HTTP exchange. Connects lazily (never fails for
  // an unreachable etcd). Errors: kInvalidArgument (no endpoint).
  static Result<std::unique_ptr<EtcdClient>> Create(std::vector<std::string> endpoints,
                                                    std::chrono::milliseconds timeout);
  ~EtcdClient();

  // Every call: kUnavailable (scope kEndpoint) when no endpoint answers,
  // naming the last one's failure; kInternal for an answer that is not
  // etcd's JSON.

  // A lease of `ttl` (at least 1 s); its id.
  Result<std::int64_t> Grant(std::chrono::seconds ttl);
  // Renews `lease` once. kNotFound: it expired (or etcd lost it).
  Status KeepAlive(std::int64_t lease);
  // Ends `lease` now; its keys go with it. An unknown lease is not an error.
  Status Revoke(std::int64_t lease);
  // key = value, attached to `lease` when not 0 (gone when it expires).
  Status Put(const std::string& key, const std::string& value, std::int64_t lease = 0);
  // The key's entry, or nullopt when absent.
  Result<std::optional<EtcdKv>> Get(const std::string& key);
  // Every entry whose key starts with `prefix`, in key order; with
  // `keys_only`, values are left empty (etcd does not send them).
  Result<std::vector<EtcdKv>> GetPrefix(const std::string& prefix, bool keys_only = false);
  Status Delete(const std::string& key);
  // key = value with `lease` only if the key does not exist (one
  // transaction); true when this call created it.
  Result<bool> CreateIfAbsent(const std::string& key, const std::string& value, std::int64_t lease);
  // Applies `writes` in one transaction, all or none, if `fence_key` is
  // held under `fence_lease` (a leader's key: only the leader writes);
  // false when it is not (nothing written). Empty `fence_key`: no
  // condition. etcd caps a transaction's writes (--max-txn-ops, 128 by
  // default) and its size (--max-request-bytes, 1.5 MiB).
  Result<bool> Txn(const std::vector<EtcdWrite>& writes, const std::string& fence_key = "",
                   std::int64_t fence_lease = 0);

 private:
  EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout);
  // POSTs `body` (JSON) to `path` on the current endpoint, then the others;
  // the answer's body.
  Result<std::string> Call(const std::string& path, const std::string& body);

  const std::vector<std::string> endpoints_;
  const std::chrono::milliseconds timeout_;
  Mutex mu_;
  std::size_t current_ SLUICE_GUARDED_BY(mu_) = 0;
  std::vector<std::unique_ptr<httplib::Client>> clients_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::discovery

#endif  // SLUICE_DISCOVERY_ETCD_CLIENT_H_
