// The LoRA adapters a cluster serves, by name: registered from a directory
// at start (every NAME.safetensors in it) or by POST /v1/adapters, each
// checked against the model (a function the deployment gives: the
// reference model's CheckReferenceAdapter), put in the store under
// AdapterStoreKey(digest) (soft-pinned: never evicted), so every
// worker loads it from there; and written to the directory, so a restart
// serves it again. A request's "lora" entries are resolved here to the
// digests the workers load.
//
// Thread safety: every method may be called from any thread (one lock;
// the store and the disk are written outside it).
#ifndef SLUICE_ORCHESTRATOR_SERVICE_ADAPTER_REGISTRY_H_
#define SLUICE_ORCHESTRATOR_SERVICE_ADAPTER_REGISTRY_H_

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "sluice/orchestrator/server.h"
#include "sluice/status.h"
#include "sluice/store/client.h"

namespace sluice::orchestrator {

class AdapterRegistry {
 public:
  struct Entry {
    std::string name, digest;
    int rank = 0;
    std::size_t bytes = 0;
    std::shared_ptr<const std::string> file;  // Its bytes, to put again if the store loses them.
  };

  // `store` (may be null: registration then fails) must outlive the
  // registry; `config.check` null: no adapters are served.
  AdapterRegistry(OrchestratorConfig::AdapterConfig config, StoreClient* store)
      : config_(std::move(config)), store_(store) {}

  // Registers every NAME.safetensors in config.dir (none when empty).
  // Errors: the first file that does not register (Register's), naming it.
  Status LoadDir();
  // Checks `bytes` (config.check), puts them in the store and, with a
  // directory, writes NAME.safetensors there. Errors: kInvalidArgument (a
  // bad name, or the check's reason), kAlreadyExists (the name is taken),
  // kFailedPrecondition (no check or no store: adapters are not served),
  // kUnavailable (the store refused the file).
  Result<Entry> Register(const std::string& name, std::string bytes);
  // Forgets `name` and removes its file (the store's copy stays for the
  // jobs that named it; it is removed when no name has its digest).
  // Errors: kNotFound.
  Status Remove(const std::string& name);
  std::vector<Entry> List() const;
  // The store reported `key` lost (a node holding it died): when it is an
  // adapter's file, puts it again (logged; best effort). Call from the
  // store's event thread; other keys are ignored.
  void Lost(const std::string& key);
  // Adds each "lora" entry's "digest" to a validated request body.
  // Errors: kNotFound naming the entry ("lora[i].name: no adapter ...").
  Status Resolve(nlohmann::json& request) const;
  bool serving() const { return static_cast<bool>(config_.check); }

 private:
  // Puts an adapter's file in the store (soft-pinned).
  Status Put(const std::string& digest, const std::string& bytes);

  OrchestratorConfig::AdapterConfig config_;
  StoreClient* store_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> by_name_;
  std::set<std::string> pending_;  // Names being registered.
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_ADAPTER_REGISTRY_H_
