// Helpers every part of the _sluice module shares: statuses raised as
// StatusException (mapped to _sluice.StatusError), timeouts in seconds, and
// config dicts whose every key must be known.
#ifndef SLUICE_PYTHON_BINDING_UTIL_H_
#define SLUICE_PYTHON_BINDING_UTIL_H_

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "sluice/memory.h"
#include "sluice/security.h"
#include "sluice/status.h"

namespace sluice::python {

namespace py = pybind11;

struct StatusException {
  Status status;
};

inline void Check(const Status& s) {
  if (!s.ok()) {
    throw StatusException{s};
  }
}
template <typename T>
T Unwrap(Result<T> r) {
  Check(r.status());
  return std::move(*r);
}

inline std::chrono::milliseconds Ms(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) {
    throw StatusException{InvalidArgumentError("timeout must be 0..1e7 seconds")};
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

// Reads one config dict; every key must be known (a typo is an error).
template <typename Fn>
void ForEachKey(const py::dict& d, const char* what, const std::vector<std::string>& known, Fn fn) {
  for (auto item : d) {
    const std::string key = py::str(item.first);
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string list;
      for (const auto& k : known) {
        list += (list.empty() ? "" : ", ") + k;
      }
      throw StatusException{InvalidArgumentError(std::string(what) + ": unknown key '" + key +
                                                 "' (known: " + list + ")")};
    }
    fn(key, py::reinterpret_borrow<py::object>(item.second));
  }
}

template <typename T>
T As(const py::object& v, const std::string& key) {
  try {
    return v.cast<T>();
  } catch (const py::cast_error&) {
    throw StatusException{InvalidArgumentError("config key '" + key + "' has the wrong type")};
  }
}

// The cluster credential and TLS from a dict of file paths (keys
// cluster_token_file or role_credential_file, tls_cert_file, tls_key_file,
// tls_ca_file); paths not
// given fall back to their SLUICE_* environment variables. encrypt_data (a
// bool) asks for encrypted transfer payload.
inline SecurityConfig LoadSecurityDict(const py::dict& d) {
  SecurityFiles f;
  bool encrypt = false;
  ForEachKey(d, "security",
             {"cluster_token_file", "role_credential_file", "tls_cert_file", "tls_key_file",
              "tls_ca_file", "encrypt_data"},
             [&](const std::string& k, const py::object& v) {
               if (k == "encrypt_data") {
                 encrypt = As<bool>(v, k);
                 return;
               }
               std::string* out = k == "cluster_token_file"     ? &f.token_file
                                  : k == "role_credential_file" ? &f.role_credential_file
                                  : k == "tls_cert_file"        ? &f.tls_cert_file
                                  : k == "tls_key_file"         ? &f.tls_key_file
                                                                : &f.tls_ca_file;
               *out = v.is_none() ? std::string() : As<std::string>(v, k);
             });
  SecurityConfig s = Unwrap(LoadSecurity(f));
  s.encrypt_data = encrypt;
  return s;
}

// "host" or "device" (what dlpack_tensor answers) as a MemoryKind.
inline MemoryKind ParseMemory(const std::string& s) {
  if (s != "host" && s != "device") {
    throw StatusException{InvalidArgumentError("memory must be host or device, got '" + s + "'")};
  }
  return s == "device" ? MemoryKind::kDevice : MemoryKind::kHost;
}

}  // namespace sluice::python

#endif  // SLUICE_PYTHON_BINDING_UTIL_H_
