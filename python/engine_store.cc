#include "engine_store.h"

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "sluice/store/client.h"
#include "sluice/transfer/engine.h"

#include "common/mutex.h"

namespace sluice::python {
namespace {

// Notifies this engine received, until Python takes them (bounded: the
// oldest go first when Python does not keep up).
class NotifyQueue {
 public:
  static constexpr std::size_t kMax = 4096;

  void Push(const NotifyMessage& m) {
    {
      MutexLock lock(mu_);
      if (queue_.size() == kMax) {
        queue_.pop_front();
      }
      queue_.emplace_back(m.sender,
                          std::string(reinterpret_cast<const char*>(m.data.data()), m.data.size()));
    }
    cv_.NotifyAll();
  }
  std::optional<std::pair<std::string, std::string>> Pop(std::chrono::milliseconds timeout) {
    MutexLock lock(mu_);
    cv_.WaitFor(lock, timeout, [this]() SLUICE_REQUIRES(mu_) { return !queue_.empty(); });
    if (queue_.empty()) {
      return std::nullopt;
    }
    auto m = std::move(queue_.front());
    queue_.pop_front();
    return m;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::deque<std::pair<std::string, std::string>> queue_ SLUICE_GUARDED_BY(mu_);
};

EngineConfig ReadEngineConfig(const py::dict& d, const py::dict& security) {
  EngineConfig c;
  ForEachKey(d, "engine config", {"listen", "transports", "io_threads", "secret", "device"},
             [&](const std::string& k, const py::object& v) {
               if (k == "listen") {
                 c.listen = As<std::string>(v, k);
               } else if (k == "transports") {
                 c.transports = As<std::vector<std::string>>(v, k);
               } else if (k == "io_threads") {
                 c.io_threads = As<int>(v, k);
               } else if (k == "secret") {
                 c.secret = As<std::string>(v, k);
               } else {
                 c.device = As<std::string>(v, k);
               }
             });
  if (c.secret.empty() && !security.empty()) {
    const SecurityConfig s = LoadSecurityDict(security);
    c.secret = TransferSecret(s);
    c.encrypt_data = s.encrypt_data;
  }
  return c;
}

Access ParseAccess(const std::string& s) {
  if (s == "local") {
    return Access::kLocalOnly;
  }
  if (s == "read") {
    return Access::kRemoteRead;
  }
  if (s == "write") {
    return Access::kRemoteWrite;
  }
  if (s == "rw") {
    return Access::kRemoteReadWrite;
  }
  throw StatusException{
      InvalidArgumentError("access must be local, read, write or rw, got '" + s + "'")};
}

// A transfer engine owned by Python; its notifies queue up for poll_notify.
class Engine {
 public:
  Engine(const py::dict& config, const py::dict& security) {
    const EngineConfig c = ReadEngineConfig(config, security);
    py::gil_scoped_release nogil;
    engine_ = Unwrap(TransferEngine::Create(c));
    engine_->SetNotifyHandler([q = notifies_](const NotifyMessage& m) { q->Push(m); });
  }

  std::string endpoint() { return Get().endpoint(); }

  std::uint64_t register_memory(std::uintptr_t ptr, std::uint64_t len, const std::string& memory,
                                int device, const std::string& access) {
    const MemoryKind kind = ParseMemory(memory);
    const Access a = ParseAccess(access);
    TransferEngine& e = Get();
    py::gil_scoped_release nogil;  // Registering device memory may export an IPC handle.
    return Unwrap(e.RegisterMemory(reinterpret_cast<void*>(ptr), len, kind, a, device)).value;
  }
  void unregister(std::uint64_t key) { Check(Get().UnregisterMemory(RegionKey{key})); }

  std::uint64_t open_segment(const std::string& endpoint) {
    TransferEngine& e = Get();
    py::gil_scoped_release nogil;
    return Unwrap(e.OpenSegment(endpoint)).value;
  }

  py::list regions(std::uint64_t segment) {
    py::list out;
    for (const RegionInfo& r : Unwrap(Get().SegmentRegions(SegmentId{segment}))) {
      py::dict d;
      d["key"] = r.key.value;
      d["length"] = r.length;
      d["memory"] = r.kind == MemoryKind::kDevice ? "device" : "host";
      d["device"] = r.device;
      d["access"] = std::string(AccessName(r.access));
      d["shared"] = r.shared;
      out.append(d);
    }
    return out;
  }

  // ops: (kind "read"|"write", local pointer, length, remote key, remote offset).
  void transfer(std::uint64_t segment,
                const std::vector<std::tuple<std::string, std::uintptr_t, std::uint64_t,
                                             std::uint64_t, std::uint64_t>>& ops,
                double timeout_s) {
    const auto timeout = Ms(timeout_s);
    if (ops.empty()) {
      throw StatusException{InvalidArgumentError("transfer: no ops")};
    }
    std::vector<TransferRequest> reqs;
    reqs.reserve(ops.size());
    for (const auto& [kind, ptr, len, key, offset] : ops) {
      if (kind != "read" && kind != "write") {
        throw StatusException{
            InvalidArgumentError("transfer: op kind must be read or write, got '" + kind + "'")};
      }
      reqs.push_back(TransferRequest{kind == "read" ? OpKind::kRead : OpKind::kWrite,
                                     reinterpret_cast<void*>(ptr), SegmentId{segment},
                                     RegionKey{key}, offset, len, TransportHint::kAuto});
    }
    TransferEngine& e = Get();
    Status s;
    {
      py::gil_scoped_release nogil;
      s = e.TransferSync(reqs, timeout);
    }
    Check(s);
  }

  void notify(std::uint64_t segment, const py::bytes& data) {
    const std::string bytes = data;
    TransferEngine& e = Get();
    py::gil_scoped_release nogil;
    Check(e.Notify(SegmentId{segment}, std::as_bytes(std::span(bytes.data(), bytes.size()))));
  }

  std::optional<std::tuple<std::string, py::bytes>> poll_notify(double timeout_s) {
    const auto timeout = Ms(timeout_s);
    std::optional<std::pair<std::string, std::string>> m;
    {
      py::gil_scoped_release nogil;
      m = notifies_->Pop(timeout);
    }
    if (!m.has_value()) {
      return std::nullopt;
    }
    return std::make_tuple(m->first, py::bytes(m->second));
  }

  py::dict counters() {
    py::dict out;
    for (const TransportStats& s : Get().TransportCounters()) {
      out[py::str(s.name)] = py::make_tuple(s.bytes_read, s.bytes_written);
    }
    return out;
  }

  TransferEngine& Get() {
    if (engine_ == nullptr) {
      throw StatusException{FailedPreconditionError("the transfer engine is closed")};
    }
    return *engine_;
  }
  void close() {
    std::unique_ptr<TransferEngine> e = std::move(engine_);
    py::gil_scoped_release nogil;
    e.reset();
  }

 private:
  std::shared_ptr<NotifyQueue> notifies_ = std::make_shared<NotifyQueue>();
  std::unique_ptr<TransferEngine> engine_;
};

LeasePolicy ParsePolicy(const std::string& s) {
  if (s == "cache") {
    return LeasePolicy::Cache();
  }
  if (s == "soft_pin") {
    return LeasePolicy::SoftPin();
  }
  if (s == "delete_on_consume") {
    return LeasePolicy::DeleteOnConsume(1);
  }
  const std::string ttl = "ttl:";
  if (s.rfind(ttl, 0) == 0) {
    const std::string n = s.substr(ttl.size());
    if (!n.empty() && n.size() <= 7 && n.find_first_not_of("0123456789") == std::string::npos &&
        std::stoul(n) >= 1) {
      return LeasePolicy::Ttl(std::chrono::seconds(std::stoul(n)));
    }
  }
  throw StatusException{InvalidArgumentError(
      "lease must be cache, soft_pin, delete_on_consume or ttl:SECONDS (1..9999999), got '" + s +
      "'")};
}

// A store client on an engine of its own.
class Store {
 public:
  Store(const std::string& master, const py::dict& engine, const py::dict& security) {
    const EngineConfig ec = ReadEngineConfig(engine, security);
    StoreClientConfig sc;
    sc.master = master;
    if (!security.empty()) {
      sc.security = LoadSecurityDict(security);
    }
    py::gil_scoped_release nogil;
    engine_ = Unwrap(TransferEngine::Create(ec));
    client_ = Unwrap(StoreClient::Create(engine_.get(), sc));
  }

  void put_bytes(const std::string& key, const py::bytes& value, const std::string& lease,
                 std::uint32_t replicas) {
    const PutOptions o = Options(lease, replicas);
    const std::string v = value;
    StoreClient& c = Get();
    py::gil_scoped_release nogil;
    Check(c.Put(key, std::as_bytes(std::span(v.data(), v.size())), o));
  }

  // Zero-copy from a tensor's memory (host or device), registered once.
  void put_from(const std::string& key, std::uintptr_t ptr, std::uint64_t len,
                const std::string& memory, int device, const std::string& lease,
                std::uint32_t replicas) {
    const PutOptions o = Options(lease, replicas);
    void* data = Register(ptr, len, memory, device);
    StoreClient& c = Get();
    py::gil_scoped_release nogil;
    Check(c.PutFrom(key, data, len, o));
  }

  py::bytes get(const std::string& key) {
    StoreClient& c = Get();
    Result<std::vector<std::byte>> r = InternalError("not run");
    {
      py::gil_scoped_release nogil;
      r = c.Get(key);
    }
    const std::vector<std::byte> v = Unwrap(std::move(r));
    return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
  }

  std::uint64_t get_into(const std::string& key, std::uintptr_t ptr, std::uint64_t len,
                         const std::string& memory, int device) {
    void* data = Register(ptr, len, memory, device);
    StoreClient& c = Get();
    Result<ObjectMeta> r = InternalError("not run");
    {
      py::gil_scoped_release nogil;
      r = c.GetInto(key, data, len);
    }
    return Unwrap(std::move(r)).size;
  }

  void remove(const std::string& key) {
    Blocking([&](StoreClient& c) { return c.Remove(key); });
  }
  bool exists(const std::string& key) {
    StoreClient& c = Get();
    Result<bool> r = InternalError("not run");
    {
      py::gil_scoped_release nogil;
      r = c.Exists(key);
    }
    return Unwrap(std::move(r));
  }
  void wait_for(const std::string& key, double timeout_s) {
    const auto t = Ms(timeout_s);
    Blocking([&](StoreClient& c) { return c.WaitFor(key, t); });
  }
  void forget(std::uintptr_t ptr) {
    auto it = regs_.find(ptr);
    if (it != regs_.end() && engine_ != nullptr &&
        engine_->UnregisterMemory(it->second.second).ok()) {
      regs_.erase(it);
    }
  }
  // The client, for other bindings on this store (the cache).
  // Errors: kFailedPrecondition once closed.
  StoreClient& client() { return Get(); }

  void close() {
    std::unique_ptr<StoreClient> c = std::move(client_);
    std::unique_ptr<TransferEngine> e = std::move(engine_);
    py::gil_scoped_release nogil;
    c.reset();
    e.reset();
  }

 private:
  static PutOptions Options(const std::string& lease, std::uint32_t replicas) {
    if (replicas < 1 || replicas > 16) {
      throw StatusException{InvalidArgumentError("replicas must be 1..16")};
    }
    PutOptions o;
    o.policy = ParsePolicy(lease);
    o.replica_num = replicas;
    return o;
  }
  StoreClient& Get() {
    if (client_ == nullptr) {
      throw StatusException{FailedPreconditionError("the store client is closed")};
    }
    return *client_;
  }
  template <typename Fn>
  void Blocking(Fn fn) {
    StoreClient& c = Get();
    Status s;
    {
      py::gil_scoped_release nogil;
      s = fn(c);
    }
    Check(s);
  }
  // The tensor's memory registered with this client's engine (cached by
  // start address; a different length or kind registers it again).
  void* Register(std::uintptr_t ptr, std::uint64_t len, const std::string& memory, int device) {
    const MemoryKind kind = ParseMemory(memory);
    Get();
    auto it = regs_.find(ptr);
    if (it != regs_.end() && it->second.first == len) {
      return reinterpret_cast<void*>(ptr);
    }
    if (it != regs_.end()) {
      (void)engine_->UnregisterMemory(it->second.second);
      regs_.erase(it);
    }
    const RegionKey key = Unwrap(engine_->RegisterMemory(reinterpret_cast<void*>(ptr), len, kind,
                                                         Access::kLocalOnly, device));
    regs_[ptr] = {len, key};
    return reinterpret_cast<void*>(ptr);
  }

  std::unique_ptr<TransferEngine> engine_;
  std::unique_ptr<StoreClient> client_;
  std::map<std::uintptr_t, std::pair<std::uint64_t, RegionKey>> regs_;  // Guarded by the GIL.
};

}  // namespace

StoreClient& StoreClientOf(const py::object& store) {
  Store* s = nullptr;
  try {
    s = &store.cast<Store&>();
  } catch (const py::cast_error&) {
    throw StatusException{InvalidArgumentError("store: want a sluice.Store")};
  }
  return s->client();
}

void RegisterEngineAndStore(py::module_& m) {
  py::class_<Engine>(m, "Engine")
      .def(py::init<const py::dict&, const py::dict&>())
      .def_property_readonly("endpoint", &Engine::endpoint)
      .def("register_memory", &Engine::register_memory)
      .def("unregister", &Engine::unregister)
      .def("open_segment", &Engine::open_segment)
      .def("regions", &Engine::regions)
      .def("transfer", &Engine::transfer)
      .def("notify", &Engine::notify)
      .def("poll_notify", &Engine::poll_notify)
      .def("counters", &Engine::counters)
      .def("close", &Engine::close);
  py::class_<Store>(m, "Store")
      .def(py::init<const std::string&, const py::dict&, const py::dict&>())
      .def("put_bytes", &Store::put_bytes)
      .def("put_from", &Store::put_from)
      .def("get", &Store::get)
      .def("get_into", &Store::get_into)
      .def("remove", &Store::remove)
      .def("exists", &Store::exists)
      .def("wait_for", &Store::wait_for)
      .def("forget", &Store::forget)
      .def("close", &Store::close);
}

}  // namespace sluice::python
