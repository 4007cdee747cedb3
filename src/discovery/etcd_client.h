// A client of etcd's v3 API through its JSON gateway (POST /v3/...; keys
// and values base64 in the JSON), over HTTP or HTTPS with cpp-httplib, with
// etcd's user/password auth when configured. Chosen
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

// `in` as etcd's JSON carries bytes (keys, values): standard base64.
std::string EtcdBase64(std::string_view in);
// The end of the key range of every key starting with `prefix` (etcd's
// range_end): the prefix with its last byte below 0xff one up; "\0" (to
// the end of the key space) when there is none.
std::string EtcdPrefixEnd(std::string prefix);

// "http[s]://host:port[,...]" to its URLs. Errors: kInvalidArgument naming
// the bad one (only http://host:port and https://host:port are accepted).
Result<std::vector<std::string>> ParseEtcdEndpoints(std::string_view list);

// How a client checks etcd and proves itself to it.
struct EtcdSecurity {
  // TLS, for https:// endpoints: the CA that signed etcd's certificates
  // (required), and this client's certificate and key for an etcd started
  // with --client-cert-auth (both or neither; the key its owner's only).
  std::string ca_file, cert_file, key_file;
  // etcd's auth: the user's password is sent only in the authenticate
  // call; the token etcd answers goes with every later call and is fetched
  // again when etcd says it is invalid (expired, or etcd restarted).
  std::string user, password;
};

class EtcdClient {
 public:
  // `endpoints`: URLs as ParseEtcdEndpoints gives them; a call goes to the
  // one that answered last and moves on to the next when it does not.
  // `timeout` bounds each HTTP exchange. Connects lazily (never fails for
  // an unreachable etcd). Errors: kInvalidArgument (no endpoint; an https
  // endpoint without a CA; TLS files with an http:// endpoint, which would
  // be plaintext; a certificate without its key or the reverse; a file
  // that cannot be read or a key file open to others; a user without a
  // password or the reverse). With an https endpoint, SIGPIPE is ignored
  // process-wide from then on: OpenSSL writes to a connection etcd closed
  // (a refused handshake) with write(2), whose SIGPIPE would end the
  // process; the write fails with EPIPE instead.
  static Result<std::unique_ptr<EtcdClient>> Create(std::vector<std::string> endpoints,
                                                    std::chrono::milliseconds timeout,
                                                    EtcdSecurity security = {});
  ~EtcdClient();

  // Every call: kUnavailable (scope kEndpoint) when no endpoint answers,
  // naming the last one's failure (a TLS handshake etcd refuses counts);
  // kUnauthenticated when etcd refuses the user or password; kInternal for
  // an answer that is not etcd's JSON.

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

  // POSTs `body` (JSON) to etcd's `path` for what the calls above do not
  // cover (auth's administration: "/v3/auth/user/add"...); the answer's
  // body. Errors as every call's; a request etcd refuses (a user that
  // exists) is kInvalidArgument with etcd's message.
  Result<std::string> Post(const std::string& path, const std::string& body);

  // Auth tokens fetched so far: the first, then one each time etcd called
  // the token invalid.
  std::uint64_t authentications() const;

 private:
  EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout,
             EtcdSecurity security);
  // POSTs `body` (JSON) to `path` on the current endpoint, then the others;
  // the answer's body. With a user, authenticates first (and again once
  // when etcd calls the token invalid).
  Result<std::string> Call(const std::string& path, const std::string& body);
  // One POST to endpoint `i` with the auth token when there is one;
  // `*status` gets the HTTP status (0: no answer, `*failure` says why).
  std::string PostLocked(std::size_t i, const std::string& path, const std::string& body,
                         int* status, std::string* failure) SLUICE_REQUIRES(mu_);
  // A fresh token from endpoint `i`. kUnauthenticated when etcd refuses
  // the user or password.
  Status AuthenticateLocked(std::size_t i) SLUICE_REQUIRES(mu_);

  const std::vector<std::string> endpoints_;
  const std::chrono::milliseconds timeout_;
  const EtcdSecurity security_;
  mutable Mutex mu_;
  std::string token_ SLUICE_GUARDED_BY(mu_);  // etcd's auth token; empty: none yet.
  std::uint64_t authentications_ SLUICE_GUARDED_BY(mu_) = 0;
  std::size_t current_ SLUICE_GUARDED_BY(mu_) = 0;
  std::vector<std::unique_ptr<httplib::Client>> clients_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::discovery

#endif  // SLUICE_DISCOVERY_ETCD_CLIENT_H_
