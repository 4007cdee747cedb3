#include "orchestrator/service/adapter_registry.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/log.h"

namespace sluice::orchestrator {
namespace {

constexpr std::string_view kSuffix = ".safetensors";

}  // namespace

Status AdapterRegistry::LoadDir() {
  if (config_.dir.empty()) {
    return Status::Ok();
  }
  std::error_code ec;
  std::filesystem::create_directories(config_.dir, ec);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(config_.dir, ec)) {
    const std::string file = e.path().filename().string();
    if (e.is_regular_file() && file.size() > kSuffix.size() && file.ends_with(kSuffix)) {
      files.push_back(e.path());
    }
  }
  if (ec) {
    return InvalidArgumentError("adapters: " + config_.dir + ": " + ec.message());
  }
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string name = path.filename().string();
    name.resize(name.size() - kSuffix.size());
    Result<Entry> e = Register(name, std::move(bytes));
    if (!e.ok()) {
      return Status(e.status().code(),
                    "adapters: " + path.string() + ": " + std::string(e.status().message()));
    }
    SLUICE_LOG(info, "adapter {} registered from {} (digest {}, rank {})", name, path.string(),
               e->digest, e->rank);
  }
  return Status::Ok();
}

Result<AdapterRegistry::Entry> AdapterRegistry::Register(const std::string& name,
                                                         std::string bytes) {
  if (!config_.check) {
    return FailedPreconditionError("adapters: this deployment serves none");
  }
  if (!ValidAdapterName(name)) {
    return InvalidArgumentError("name: 1.." + std::to_string(kMaxAdapterNameBytes) +
                                " letters, digits, '-', '_' or '.', not starting with '.'");
  }
  if (store_ == nullptr) {
    return FailedPreconditionError(
        "adapters: need a store this orchestrator can write to (--store-master; listening on "
        "every address, --advertise)");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (by_name_.count(name) != 0 || !pending_.insert(name).second) {
      return AlreadyExistsError("adapter \"" + name + "\" is registered (DELETE it first)");
    }
  }
  auto done = [this, &name] {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(name);
  };
  Result<AdapterFacts> facts = config_.check(bytes);
  if (!facts.ok()) {
    done();
    return InvalidArgumentError(std::string(facts.status().message()));
  }
  Status put = Put(facts->digest, bytes);
  if (!put.ok() && put.code() != StatusCode::kAlreadyExists) {
    done();
    return UnavailableError("adapters: the store refused the file: " + put.ToString(),
                            FailureScope::kEndpoint);
  }
  if (!config_.dir.empty()) {
    const std::filesystem::path path =
        std::filesystem::path(config_.dir) / (name + std::string(kSuffix));
    if (!std::filesystem::exists(path)) {
      const std::filesystem::path tmp = path.string() + ".tmp";
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      out.close();
      std::error_code ec;
      if (!out || (std::filesystem::rename(tmp, path, ec), ec)) {
        std::filesystem::remove(tmp, ec);
        done();
        return UnavailableError("adapters: cannot write " + path.string(), FailureScope::kRequest);
      }
    }
  }
  Entry e{name, facts->digest, facts->rank, facts->bytes,
          std::make_shared<const std::string>(std::move(bytes))};
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(name);
  by_name_[name] = e;
  return e;
}

Status AdapterRegistry::Put(const std::string& digest, const std::string& bytes) {
  PutOptions po;
  po.policy = LeasePolicy::SoftPin();
  return store_->Put(
      AdapterStoreKey(digest),
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
      po);
}

void AdapterRegistry::Lost(const std::string& key) {
  const std::string prefix = AdapterStoreKey("");
  if (!key.starts_with(prefix) || store_ == nullptr) {
    return;
  }
  const std::string digest = key.substr(prefix.size());
  std::shared_ptr<const std::string> file;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, e] : by_name_) {
      if (e.digest == digest) {
        file = e.file;
        break;
      }
    }
  }
  if (file == nullptr) {
    return;  // No name has it any more.
  }
  const Status s = Put(digest, *file);
  if (s.ok() || s.code() == StatusCode::kAlreadyExists) {
    SLUICE_LOG(info, "adapter {}: the store lost its file; put it again", digest);
  } else {
    SLUICE_LOG(warn, "adapter {}: the store lost its file, and putting it again failed: {}", digest,
               s.ToString());
  }
}

Status AdapterRegistry::Remove(const std::string& name) {
  std::string digest;
  bool shared = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      return NotFoundError("no adapter \"" + name + "\"");
    }
    digest = it->second.digest;
    by_name_.erase(it);
    for (const auto& [n, e] : by_name_) {
      shared = shared || e.digest == digest;
    }
  }
  if (!config_.dir.empty()) {
    std::error_code ec;
    std::filesystem::remove(std::filesystem::path(config_.dir) / (name + std::string(kSuffix)), ec);
  }
  if (!shared && store_ != nullptr) {
    (void)store_->Remove(AdapterStoreKey(digest));
  }
  return Status::Ok();
}

std::vector<AdapterRegistry::Entry> AdapterRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  for (const auto& [name, e] : by_name_) {
    out.push_back(e);
  }
  return out;
}

Status AdapterRegistry::Resolve(nlohmann::json& request) const {
  auto it = request.find("lora");
  if (it == request.end()) {
    return Status::Ok();
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t i = 0; i < it->size(); ++i) {
    nlohmann::json& e = (*it)[i];
    const std::string name = e["name"].get<std::string>();
    auto found = by_name_.find(name);
    if (found == by_name_.end()) {
      return NotFoundError("lora[" + std::to_string(i) + "].name: no adapter \"" + name +
                           "\" (GET /v1/adapters lists them)");
    }
    e["digest"] = found->second.digest;
  }
  return Status::Ok();
}

}  // namespace sluice::orchestrator
