#include "cache_binding.h"

#include <optional>

#include "sluice/cache/cache.h"
#include "sluice/cache/keys.h"

#include "binding_util.h"
#include "engine_store.h"

namespace sluice::python {
namespace {

// fields: (name, type, value) with type text | int | float | ints | texts.
std::vector<cache::Field> ReadFields(const py::list& fields) {
  std::vector<cache::Field> out;
  for (const py::handle item : fields) {
    const auto t = item.cast<py::tuple>();
    if (t.size() != 3) {
      throw StatusException{InvalidArgumentError("fields: want (name, type, value) tuples")};
    }
    cache::Field f;
    f.name = t[0].cast<std::string>();
    const std::string type = t[1].cast<std::string>();
    try {
      if (type == "text") {
        f.value = t[2].cast<std::string>();
      } else if (type == "int") {
        f.value = t[2].cast<std::int64_t>();
      } else if (type == "float") {
        f.value = t[2].cast<double>();
      } else if (type == "ints") {
        f.value = t[2].cast<std::vector<std::int64_t>>();
      } else if (type == "texts") {
        f.value = t[2].cast<std::vector<std::string>>();
      } else {
        throw StatusException{
            InvalidArgumentError("field '" + f.name + "': unknown type '" + type + "'")};
      }
    } catch (const py::cast_error&) {
      throw StatusException{
          InvalidArgumentError("field '" + f.name + "': the value is not of type " + type)};
    }
    out.push_back(std::move(f));
  }
  return out;
}

py::bytes ToBytes(const std::vector<std::byte>& v) {
  return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

// A cache on a _sluice.Store, which it keeps alive.
class PyCache {
 public:
  PyCache(py::object store, const std::string& name, const std::string& lease, double claim_ttl_s,
          double wait_timeout_s)
      : store_(std::move(store)), client_(&StoreClientOf(store_)) {
    cache::CacheOptions o;
    o.name = name;
    if (lease == "cache") {
      o.policy = LeasePolicy::Cache();
    } else if (lease == "soft_pin") {
      o.policy = LeasePolicy::SoftPin();
    } else {
      throw StatusException{
          InvalidArgumentError("lease must be cache or soft_pin, got '" + lease + "'")};
    }
    o.claim_ttl = Ms(claim_ttl_s);
    o.wait_timeout = Ms(wait_timeout_s);
    cache_ = Unwrap(cache::Cache::Create(client_, o));
  }

  // `compute()` returns a bytes-like value; it runs with the GIL held, and
  // what it raises reaches the caller unchanged.
  py::bytes get_or_compute(const std::string& key, const py::function& compute) {
    Live();
    std::optional<py::error_already_set> raised;
    Result<std::vector<std::byte>> r = InternalError("not run");
    {
      py::gil_scoped_release nogil;
      r = cache_->GetOrCompute(key, [&]() -> Result<std::vector<std::byte>> {
        py::gil_scoped_acquire gil;
        try {
          const py::object value = compute();
          if (!PyObject_CheckBuffer(value.ptr())) {
            return InvalidArgumentError("compute must return a bytes-like value, not " +
                                        std::string(py::str(value.get_type().attr("__name__"))));
          }
          const py::buffer_info b = py::reinterpret_borrow<py::buffer>(value).request();
          py::ssize_t stride = b.itemsize;
          for (py::ssize_t d = b.ndim - 1; d >= 0; --d) {
            if (b.shape[d] > 1 && b.strides[d] != stride) {
              return InvalidArgumentError("compute must return a contiguous bytes-like value");
            }
            stride *= b.shape[d];
          }
          const auto* p = static_cast<const std::byte*>(b.ptr);
          return std::vector<std::byte>(p, p + b.size * b.itemsize);
        } catch (py::error_already_set& e) {
          raised = std::move(e);
          return Status(StatusCode::kCancelled, "compute raised");
        }
      });
    }
    if (raised.has_value()) {
      throw *raised;
    }
    return ToBytes(Unwrap(std::move(r)));
  }

  py::object lookup(const std::string& key) {
    Live();
    Result<std::optional<std::vector<std::byte>>> r = InternalError("not run");
    {
      py::gil_scoped_release nogil;
      r = cache_->Lookup(key);
    }
    std::optional<std::vector<std::byte>> v = Unwrap(std::move(r));
    return v.has_value() ? py::object(ToBytes(*v)) : py::none();
  }

  void insert(const std::string& key, const py::bytes& value) {
    Live();
    const std::string v = value;
    py::gil_scoped_release nogil;
    Check(cache_->Insert(key, std::as_bytes(std::span(v.data(), v.size()))));
  }

  const cache::Cache* get() const { return cache_.get(); }

  py::dict stats() const {
    const cache::CacheStats s = cache_->stats();
    py::dict d;
    d["lookups"] = s.lookups;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["computes"] = s.computes;
    d["single_flight_waits"] = s.single_flight_waits;
    d["takeovers"] = s.takeovers;
    d["bytes_inserted"] = s.bytes_inserted;
    return d;
  }

 private:
  // The store must still be open (closing it frees the client).
  void Live() {
    if (&StoreClientOf(store_) != client_) {
      throw StatusException{FailedPreconditionError("the store this cache uses was closed")};
    }
  }

  py::object store_;
  StoreClient* client_;
  std::unique_ptr<cache::Cache> cache_;
};

}  // namespace

const cache::Cache* CacheOf(const py::handle& c) {
  try {
    return c.cast<PyCache&>().get();
  } catch (const py::cast_error&) {
    throw StatusException{InvalidArgumentError("caches: want sluice.cache.Cache objects")};
  }
}

void RegisterCache(py::module_& m) {
  m.def("cache_make_key", [](const std::string& kind, const py::list& fields) {
    return Unwrap(cache::MakeKey(kind, ReadFields(fields)));
  });
  py::class_<PyCache>(m, "Cache")
      .def(py::init<py::object, const std::string&, const std::string&, double, double>())
      .def("get_or_compute", &PyCache::get_or_compute)
      .def("lookup", &PyCache::lookup)
      .def("insert", &PyCache::insert)
      .def("stats", &PyCache::stats);
}

}  // namespace sluice::python
