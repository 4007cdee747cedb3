// A disk tier's index: the objects on the tier's file, kept in a small file
// beside it (written whole to a temporary and renamed), so that a node
// restarted on the same --disk directory registers them again instead of
// losing them.
//
// It is conservative in one direction only: an object leaves the index
// before a spill may overwrite its bytes (Forget), so a listed object's
// bytes are always its own. It may list an object the master has since
// loaded back or removed (the node died before hearing it); the master
// takes such records back only when its own view agrees (master_state.cc).
#ifndef SLUICE_STORE_NODE_DISK_INDEX_H_
#define SLUICE_STORE_NODE_DISK_INDEX_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sluice/status.h"

#include "common/mutex.h"
#include "proto/store/v1/master.pb.h"

namespace sluice::internal {

class DiskIndex {
 public:
  // Reads the index at `path` that a previous run wrote for a tier of
  // `tier_bytes`: the on-disk objects whose TTL has not run out since.
  // Errors: kNotFound (no index), kDataLoss (unreadable, or written for
  // another tier size): the tier starts empty.
  static Result<std::vector<store::v1::ObjectRecord>> Load(const std::string& path,
                                                           std::uint64_t tier_bytes);

  // An index at `path` listing `objects` (what Load returned, or none).
  DiskIndex(std::string path, std::uint64_t tier_bytes,
            const std::vector<store::v1::ObjectRecord>& objects);

  // Writes the index now. Errors: kUnavailable (the file cannot be
  // written; the tier works on, but a restart would lose its objects).
  Status Save();

  // Applies a heartbeat's directory changes: a record on disk joins, any
  // other change to a key (loaded back, removed) drops it. Saves when the
  // listing changed.
  Status Apply(const google::protobuf::RepeatedPtrField<store::v1::NodeDelta>& deltas);

  // Drops every object whose disk bytes overlap [offset, offset + size):
  // before a spill writes there. Saves when the listing changed.
  Status Forget(std::uint64_t offset, std::uint64_t size);

  // Objects listed now (tests).
  std::size_t size();

 private:
  struct Entry {
    store::v1::ObjectRecord record;
    std::optional<std::chrono::system_clock::time_point> expires;  // TTL objects.
  };
  Status SaveLocked() SLUICE_REQUIRES(mu_);

  const std::string path_;
  const std::uint64_t tier_bytes_;
  Mutex mu_;  // Held while the file is written: saves never interleave.
  std::map<std::string, Entry> entries_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::internal

#endif  // SLUICE_STORE_NODE_DISK_INDEX_H_
