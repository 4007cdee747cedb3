#include "transfer/wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "common/mutex.h"

namespace sluice::internal {
namespace {

constexpr std::size_t kMaxHostId = 64;

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void PutString(std::string_view s) {
    Put<std::uint32_t>(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() < sizeof(T)) {
      return false;
    }
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool GetString(std::string* s, std::size_t max) {
    std::uint32_t n = 0;
    if (!Get(&n) || n > max || in_.size() < n) {
      return false;
    }
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool empty() const { return in_.empty(); }

 private:
  std::string_view in_;
};

void PutHost(Writer& w, const HostInfo& h) {
  w.PutString(h.boot_id);
  w.Put(h.pid_ns);
  w.Put(h.pid);
  w.Put(h.probe_addr);
  w.Put(h.probe);
  w.PutString(h.host_id);
}

bool GetHost(Reader& r, HostInfo* h) {
  return r.GetString(&h->boot_id, 64) && r.Get(&h->pid_ns) && r.Get(&h->pid) &&
         r.Get(&h->probe_addr) && r.Get(&h->probe) && r.GetString(&h->host_id, kMaxHostId);
}

bool ValidTransportName(std::string_view name) {
  if (name.empty() || name.size() > kMaxTransportName) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

void PutBlobs(Writer& w, const std::vector<AccessBlob>& blobs) {
  w.Put<std::uint8_t>(static_cast<std::uint8_t>(blobs.size()));
  for (const AccessBlob& b : blobs) {
    w.PutString(b.transport);
    w.PutString(b.bytes);
  }
}

// At most kMaxAccessBlobs blobs of at most `max_bytes` each, with valid and
// distinct names.
bool GetBlobs(Reader& r, std::size_t max_bytes, std::vector<AccessBlob>* blobs) {
  std::uint8_t n = 0;
  if (!r.Get(&n) || n > kMaxAccessBlobs) {
    return false;
  }
  blobs->resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    AccessBlob& b = (*blobs)[i];
    if (!r.GetString(&b.transport, kMaxTransportName) || !ValidTransportName(b.transport) ||
        !r.GetString(&b.bytes, max_bytes)) {
      return false;
    }
    for (std::size_t j = 0; j < i; ++j) {
      if ((*blobs)[j].transport == b.transport) {
        return false;
      }
    }
  }
  return true;
}

void PutTable(Writer& w, const RegionTable& t) {
  w.Put(t.version);
  w.Put<std::uint32_t>(static_cast<std::uint32_t>(t.regions.size()));
  for (const WireRegion& r : t.regions) {
    w.Put(r.info.key.value);
    w.Put(r.info.addr);
    w.Put(r.info.length);
    w.Put(static_cast<std::uint8_t>(r.info.kind));
    w.Put(static_cast<std::uint8_t>(r.info.access));
    w.Put(static_cast<std::uint8_t>(r.info.shared));
    w.Put<std::int32_t>(r.info.device);
    PutBlobs(w, r.access);
  }
}

bool GetTable(Reader& r, RegionTable* t) {
  std::uint32_t n = 0;
  if (!r.Get(&t->version) || !r.Get(&n) || n > 65536) {
    return false;
  }
  t->regions.resize(n);
  for (WireRegion& reg : t->regions) {
    std::uint8_t kind = 0, access = 0, shared = 0;
    std::int32_t device = -1;
    if (!r.Get(&reg.info.key.value) || !r.Get(&reg.info.addr) || !r.Get(&reg.info.length) ||
        !r.Get(&kind) || !r.Get(&access) || !r.Get(&shared) || !r.Get(&device) ||
        !GetBlobs(r, kMaxAccessBlob, &reg.access)) {
      return false;
    }
    if (kind > 1 || access > 3 || shared > 1) {
      return false;
    }
    // Host memory has no device; device memory names one (0..1023).
    if ((kind == 0) != (device == -1) || device < -1 || device > 1023) {
      return false;
    }
    reg.info.device = device;
    reg.info.kind = static_cast<MemoryKind>(kind);
    reg.info.access = static_cast<Access>(access);
    reg.info.shared = shared != 0;
  }
  return true;
}

Status Malformed(std::string_view what) {
  return InvalidArgumentError("malformed " + std::string(what) + " body");
}

Status ValidHostId(std::string_view id, std::string_view what) {
  if (id.empty() || id.size() > kMaxHostId ||
      id.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") !=
          std::string_view::npos) {
    return InvalidArgumentError(std::string(what) + " '" + std::string(id) +
                                "' must be 1-64 of [A-Za-z0-9._-]");
  }
  return Status::Ok();
}

// The host id SetHostId gave, until Self() fixes it.
Mutex host_id_mu;
std::string host_id_given SLUICE_GUARDED_BY(host_id_mu);
bool host_id_fixed SLUICE_GUARDED_BY(host_id_mu) = false;

std::string FixHostId() {
  MutexLock lock(host_id_mu);
  host_id_fixed = true;
  if (!host_id_given.empty()) {
    return host_id_given;
  }
  const char* env = std::getenv("SLUICE_HOST_ID");
  return env != nullptr && ValidHostId(env, "SLUICE_HOST_ID").ok() ? env : "";
}

HostInfo ReadSelf() {
  HostInfo h;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::getline(boot, h.boot_id);
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) == 0) {
    h.pid_ns = st.st_ino;
  }
  h.pid = static_cast<std::int32_t>(::getpid());
  h.host_id = FixHostId();
  return h;
}

}  // namespace

bool HostInfo::SameHostAs(const HostInfo& peer) const {
  if (boot_id.empty() || boot_id != peer.boot_id || host_id != peer.host_id) {
    return false;
  }
  return !host_id.empty() || pid_ns == peer.pid_ns;
}

Status CheckHostIdEnvironment() {
  const char* env = std::getenv("SLUICE_HOST_ID");
  return env == nullptr ? Status::Ok() : ValidHostId(env, "SLUICE_HOST_ID");
}

}  // namespace sluice::internal

namespace sluice {

Status SetHostId(std::string_view id) {
  SLUICE_RETURN_IF_ERROR(internal::ValidHostId(id, "host id"));
  MutexLock lock(internal::host_id_mu);
  if (internal::host_id_fixed) {
    return FailedPreconditionError("host id: set it before the first transfer engine starts");
  }
  internal::host_id_given = std::string(id);
  return Status::Ok();
}

}  // namespace sluice

namespace sluice::internal {

const HostInfo& HostInfo::Self() {
  // The probe lives in this static, so its address is stable for the process.
  static HostInfo self = [] {
    HostInfo h = ReadSelf();
    RandomBytes(h.probe.data(), h.probe.size());
    return h;
  }();
  static const bool addr_set = [] {
    self.probe_addr = reinterpret_cast<std::uint64_t>(self.probe.data());
    return true;
  }();
  (void)addr_set;
  return self;
}

const std::string* FindBlob(const std::vector<AccessBlob>& blobs, std::string_view transport) {
  for (const AccessBlob& b : blobs) {
    if (b.transport == transport) {
      return &b.bytes;
    }
  }
  return nullptr;
}

std::string EncodeClientHello(const ClientHello& hello) {
  Writer w;
  w.Put(hello.mac);
  w.Put(hello.client_nonce);
  w.PutString(hello.endpoint);
  PutHost(w, hello.host);
  return w.Take();
}

Result<ClientHello> DecodeClientHello(std::string_view body) {
  Reader r(body);
  ClientHello h;
  if (!r.Get(&h.mac) || !r.Get(&h.client_nonce) || !r.GetString(&h.endpoint, 512) ||
      !GetHost(r, &h.host) || !r.empty()) {
    return Malformed("client hello");
  }
  return h;
}

std::string EncodeHelloOk(const HelloOk& ok) {
  Writer w;
  w.Put(ok.mac);
  PutHost(w, ok.host);
  PutTable(w, ok.table);
  PutBlobs(w, ok.links);
  return w.Take();
}

Result<HelloOk> DecodeHelloOk(std::string_view body) {
  Reader r(body);
  HelloOk ok;
  if (!r.Get(&ok.mac) || !GetHost(r, &ok.host) || !GetTable(r, &ok.table) ||
      !GetBlobs(r, kMaxLinkBlob, &ok.links) || !r.empty()) {
    return Malformed("hello-ok");
  }
  return ok;
}

std::string EncodeTable(const RegionTable& table) {
  Writer w;
  PutTable(w, table);
  return w.Take();
}

Result<RegionTable> DecodeTable(std::string_view body) {
  Reader r(body);
  RegionTable t;
  if (!GetTable(r, &t) || !r.empty()) {
    return Malformed("region table");
  }
  return t;
}

namespace {

// HMAC-SHA256(secret, the parts one after another); zeros without a secret.
std::array<std::uint8_t, 32> Mac(std::string_view secret,
                                 std::initializer_list<std::string_view> parts) {
  std::array<std::uint8_t, 32> mac{};
  if (secret.empty()) {
    return mac;
  }
  std::string message;
  for (std::string_view p : parts) {
    message.append(p);
  }
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac.data(), &len);
  return mac;
}

std::string_view Bytes(const std::array<std::uint8_t, kNonceBytes>& a) {
  return {reinterpret_cast<const char*>(a.data()), a.size()};
}

}  // namespace

std::array<std::uint8_t, 32> ClientHelloMac(std::string_view secret,
                                            const std::array<std::uint8_t, kNonceBytes>& nonce,
                                            const ClientHello& hello) {
  ClientHello unsigned_hello = hello;
  unsigned_hello.mac = {};
  return Mac(secret, {"sluice-client-hello", Bytes(nonce), EncodeClientHello(unsigned_hello)});
}

std::array<std::uint8_t, 32> HelloOkMac(std::string_view secret,
                                        const std::array<std::uint8_t, kNonceBytes>& server_nonce,
                                        const std::array<std::uint8_t, kNonceBytes>& client_nonce,
                                        const HelloOk& ok) {
  HelloOk unsigned_ok = ok;
  unsigned_ok.mac = {};
  return Mac(secret, {"sluice-hello-ok", Bytes(server_nonce), Bytes(client_nonce),
                      EncodeHelloOk(unsigned_ok)});
}

bool MacEquals(const std::array<std::uint8_t, 32>& a, const std::array<std::uint8_t, 32>& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace sluice::internal
