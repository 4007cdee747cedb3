#include "store/node/disk_index.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "common/net.h"

namespace sluice::internal {

namespace pb = ::sluice::store::v1;

namespace {

std::int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The index is small (one record per object on disk); a larger file is not
// one this node wrote.
constexpr std::size_t kMaxIndexBytes = std::size_t{256} << 20;

}  // namespace

Result<std::vector<pb::ObjectRecord>> DiskIndex::Load(const std::string& path,
                                                      std::uint64_t tier_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFoundError("no disk-tier index at " + path);
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string bytes = buf.str();
  pb::DiskIndex index;
  if (bytes.size() > kMaxIndexBytes || !index.ParseFromString(bytes)) {
    return Status(StatusCode::kDataLoss, "disk-tier index " + path + " is unreadable");
  }
  if (index.tier_bytes() != tier_bytes) {
    return Status(StatusCode::kDataLoss, "disk-tier index " + path + " describes a tier of " +
                                             std::to_string(index.tier_bytes()) + " bytes, not " +
                                             std::to_string(tier_bytes));
  }
  const std::int64_t age_ms =
      std::max<std::int64_t>(0, NowUnixMs() - static_cast<std::int64_t>(index.written_unix_ms()));
  std::vector<pb::ObjectRecord> out;
  for (pb::ObjectRecord& r : *index.mutable_objects()) {
    if (!r.on_disk() || r.size() == 0 || r.disk_offset() > tier_bytes ||
        r.size() > tier_bytes - r.disk_offset()) {
      continue;  // Not a record this node wrote for this tier.
    }
    if (r.ttl_left_ms() > 0) {
      if (static_cast<std::int64_t>(r.ttl_left_ms()) <= age_ms) {
        continue;  // Expired while the node was down.
      }
      r.set_ttl_left_ms(r.ttl_left_ms() - static_cast<std::uint64_t>(age_ms));
    }
    out.push_back(std::move(r));
  }
  return out;
}

DiskIndex::DiskIndex(std::string path, std::uint64_t tier_bytes,
                     const std::vector<pb::ObjectRecord>& objects)
    : path_(std::move(path)), tier_bytes_(tier_bytes) {
  const auto now = std::chrono::system_clock::now();
  MutexLock lock(mu_);
  for (const pb::ObjectRecord& r : objects) {
    Entry& e = entries_[r.key()];
    e.record = r;
    if (r.ttl_left_ms() > 0) {
      e.expires = now + std::chrono::milliseconds(r.ttl_left_ms());
    }
  }
}

Status DiskIndex::Save() {
  MutexLock lock(mu_);
  return SaveLocked();
}

Status DiskIndex::SaveLocked() {
  pb::DiskIndex index;
  index.set_tier_bytes(tier_bytes_);
  index.set_written_unix_ms(static_cast<std::uint64_t>(NowUnixMs()));
  const auto now = std::chrono::system_clock::now();
  for (const auto& [key, e] : entries_) {
    pb::ObjectRecord* r = index.add_objects();
    *r = e.record;
    if (e.expires.has_value()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*e.expires - now);
      r->set_ttl_left_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(1, left.count())));
    }
  }
  const std::string bytes = index.SerializeAsString();
  const std::string tmp = path_ + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    return UnavailableError("cannot write " + tmp + ": " + strerror(errno),
                            FailureScope::kTransport);
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t k = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (k <= 0) {
      return UnavailableError("cannot write " + tmp + ": " + strerror(errno),
                              FailureScope::kTransport);
    }
    done += static_cast<std::size_t>(k);
  }
  // Durable before it replaces the old index: a crash leaves one or the other.
  if (::fsync(fd.get()) != 0 || ::rename(tmp.c_str(), path_.c_str()) != 0) {
    return UnavailableError("cannot replace " + path_ + ": " + strerror(errno),
                            FailureScope::kTransport);
  }
  return Status::Ok();
}

Status DiskIndex::Apply(const google::protobuf::RepeatedPtrField<pb::NodeDelta>& deltas) {
  const auto now = std::chrono::system_clock::now();
  MutexLock lock(mu_);
  bool changed = false;
  for (const pb::NodeDelta& d : deltas) {
    if (d.added() && d.record().on_disk()) {
      Entry& e = entries_[d.record().key()];
      e.record = d.record();
      e.expires.reset();
      if (d.record().ttl_left_ms() > 0) {
        e.expires = now + std::chrono::milliseconds(d.record().ttl_left_ms());
      }
      changed = true;
    } else {
      changed = entries_.erase(d.record().key()) > 0 || changed;
    }
  }
  return changed ? SaveLocked() : Status::Ok();
}

Status DiskIndex::Forget(std::uint64_t offset, std::uint64_t size) {
  MutexLock lock(mu_);
  const std::size_t erased = std::erase_if(entries_, [&](const auto& kv) {
    const pb::ObjectRecord& r = kv.second.record;
    return r.disk_offset() < offset + size && offset < r.disk_offset() + r.size();
  });
  return erased > 0 ? SaveLocked() : Status::Ok();
}

std::size_t DiskIndex::size() {
  MutexLock lock(mu_);
  return entries_.size();
}

}  // namespace sluice::internal
