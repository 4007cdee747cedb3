#include "store/node/disk_tier.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <utility>

#include "common/log.h"
#include "common/mutex.h"

namespace sluice::internal {

namespace pb = ::sluice::store::v1;

namespace {

// A command copies in blocks of this size, checking between blocks whether
// the node stops and pacing to the rate cap.
constexpr std::uint64_t kBlock = std::uint64_t{4} << 20;

}  // namespace

DiskTier::DiskTier(std::uint64_t bytes, std::uint64_t bytes_per_s, Resolve resolve,
                   std::function<void()> on_result)
    : bytes_(bytes),
      bytes_per_s_(bytes_per_s),
      resolve_(std::move(resolve)),
      on_result_(std::move(on_result)) {}

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const std::string& dir, std::uint64_t bytes,
                                                 const std::string& node_id,
                                                 std::uint64_t bytes_per_s, Resolve resolve,
                                                 std::function<void()> on_result) {
  if (dir.empty() || bytes < (std::uint64_t{1} << 20)) {
    return InvalidArgumentError("store node: a disk tier needs --disk DIR and at least 1 MiB");
  }
  std::unique_ptr<DiskTier> t(
      new DiskTier(bytes, bytes_per_s, std::move(resolve), std::move(on_result)));
  std::string name;
  for (char c : node_id) {
    name.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  }
  t->path_ = dir + "/sluice-" + name + ".tier";
  const std::string index_path = t->path_ + ".index";
  struct stat st {};
  const bool file_there = ::stat(t->path_.c_str(), &st) == 0;
  if (file_there && static_cast<std::uint64_t>(st.st_size) == bytes) {
    Result<std::vector<pb::ObjectRecord>> listed = DiskIndex::Load(index_path, bytes);
    if (listed.ok()) {
      t->fd_.reset(::open(t->path_.c_str(), O_RDWR | O_CLOEXEC));
      if (t->fd_.valid()) {
        t->recovered_ = std::move(*listed);
        t->index_ = std::make_unique<DiskIndex>(index_path, bytes, t->recovered_);
        SLUICE_LOG(info, "store node: disk tier {} kept: {} object(s) from the previous run",
                   t->path_, t->recovered_.size());
      }
    } else {
      SLUICE_LOG(warn, "store node: disk tier {} starts empty: {}", t->path_,
                 listed.status().ToString());
    }
  } else if (file_there) {
    SLUICE_LOG(warn, "store node: disk tier {} starts empty: it holds {} bytes, not {}", t->path_,
               st.st_size, bytes);
  }
  if (t->index_ == nullptr) {
    // An empty index first: the old one must never describe the new file.
    t->index_ = std::make_unique<DiskIndex>(index_path, bytes, std::vector<pb::ObjectRecord>{});
    SLUICE_RETURN_IF_ERROR(t->index_->Save());
    t->fd_.reset(::open(t->path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!t->fd_.valid()) {
      return InvalidArgumentError("store node: cannot create " + t->path_ + ": " + strerror(errno));
    }
    const int rc = ::posix_fallocate(t->fd_.get(), 0, static_cast<off_t>(bytes));
    if (rc == EOPNOTSUPP || rc == EINVAL) {
      if (::ftruncate(t->fd_.get(), static_cast<off_t>(bytes)) != 0) {
        return ResourceExhaustedError("store node: cannot size " + t->path_);
      }
    } else if (rc != 0) {
      return ResourceExhaustedError("store node: cannot reserve " + std::to_string(bytes) +
                                    " bytes in " + t->path_ + ": " + strerror(rc));
    }
  }
  t->thread_ = std::thread([p = t.get()] { p->Loop(); });
  return t;
}

DiskTier::~DiskTier() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void DiskTier::Update(const google::protobuf::RepeatedPtrField<pb::NodeCommand>& commands) {
  std::set<std::uint64_t> ids;
  {
    MutexLock lock(mu_);
    for (const pb::NodeCommand& c : commands) {
      ids.insert(c.id());
      if (listed_.insert(c.id()).second) {
        queue_.push_back(c);
      }
    }
    // The master stops listing a command once it has its result (or it
    // restarted, or dropped this node): forget it, and skip it if queued.
    std::erase_if(listed_, [&](std::uint64_t id) { return !ids.contains(id); });
    std::erase_if(results_, [&](const auto& e) { return !ids.contains(e.first); });
    std::erase_if(queue_, [&](const pb::NodeCommand& c) { return !ids.contains(c.id()); });
  }
  cv_.NotifyAll();
}

std::vector<pb::ObjectRecord> DiskTier::TakeRecovered() {
  return std::exchange(recovered_, {});
}

void DiskTier::ApplyDeltas(const google::protobuf::RepeatedPtrField<pb::NodeDelta>& deltas) {
  const Status s = index_->Apply(deltas);
  if (!s.ok() && !index_failing_) {
    SLUICE_LOG(warn, "store node: disk tier index not saved (a restart would lose it): {}",
               s.ToString());
  }
  index_failing_ = !s.ok();
}

std::vector<pb::CommandResult> DiskTier::Results() {
  MutexLock lock(mu_);
  std::vector<pb::CommandResult> out;
  out.reserve(results_.size());
  for (const auto& [id, r] : results_) {
    out.push_back(r);
  }
  return out;
}

void DiskTier::Quiesce() {
  MutexLock lock(mu_);
  queue_.clear();
  listed_.clear();
  results_.clear();
  cv_.Wait(lock, [this]() SLUICE_REQUIRES(mu_) { return !running_; });
}

void DiskTier::Loop() {
  pthread_setname_np(pthread_self(), "sluice-disk");
  MutexLock lock(mu_);
  while (true) {
    cv_.Wait(lock, [this]() SLUICE_REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
    if (stopping_) {
      return;
    }
    const pb::NodeCommand c = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.Unlock();
    pb::CommandResult r = Run(c);
    lock.Lock();
    running_ = false;
    if (!r.ok()) {
      ++counters_.failed;
    } else if (c.kind() == pb::NodeCommand::SPILL) {
      ++counters_.spills;
      counters_.bytes_spilled += c.size();
    } else {
      ++counters_.loads;
      counters_.bytes_loaded += c.size();
    }
    cv_.NotifyAll();  // Quiesce.
    if (stopping_) {
      return;
    }
    if (listed_.contains(c.id())) {
      results_[c.id()] = std::move(r);
      lock.Unlock();
      on_result_();
      lock.Lock();
    }
  }
}

pb::CommandResult DiskTier::Run(const pb::NodeCommand& c) {
  pb::CommandResult r;
  r.set_id(c.id());
  char* mem = resolve_(c.mem_region_key(), c.mem_offset(), c.size());
  if (mem == nullptr || c.disk_offset() > bytes_ || c.size() > bytes_ - c.disk_offset()) {
    r.set_error("command " + std::to_string(c.id()) + " is outside this node's memory or disk");
    return r;
  }
  const bool spill = c.kind() == pb::NodeCommand::SPILL;
  if (spill) {
    // Whatever the index still lists there is about to be overwritten.
    if (Status s = index_->Forget(c.disk_offset(), c.size()); !s.ok()) {
      r.set_error(s.ToString());
      return r;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t done = 0;
  while (done < c.size()) {
    {
      MutexLock lock(mu_);
      if (stopping_) {
        r.set_error("store node is stopping");
        return r;
      }
    }
    const std::uint64_t n = std::min(kBlock, c.size() - done);
    std::uint64_t moved = 0;
    while (moved < n) {
      const auto off = static_cast<off_t>(c.disk_offset() + done + moved);
      const ssize_t k = spill ? ::pwrite(fd_.get(), mem + done + moved, n - moved, off)
                              : ::pread(fd_.get(), mem + done + moved, n - moved, off);
      if (k <= 0) {
        r.set_error(std::string(spill ? "write " : "read ") + path_ + ": " +
                    (k < 0 ? strerror(errno) : "short transfer"));
        return r;
      }
      moved += static_cast<std::uint64_t>(k);
    }
    done += n;
    if (bytes_per_s_ > 0) {
      // Paced: block i may end no earlier than its share of the rate allows.
      MutexLock lock(mu_);
      cv_.WaitUntil(lock, start + std::chrono::microseconds(done * 1000000 / bytes_per_s_),
                    [this]() SLUICE_REQUIRES(mu_) { return stopping_; });
    }
  }
  r.set_ok(true);
  return r;
}

}  // namespace sluice::internal
