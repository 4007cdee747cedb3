// A store node's disk tier: one preallocated file, and a thread that runs
// the master's spill (memory -> disk) and load (disk -> memory) commands,
// so that the node's heartbeats never wait for the disk (a long spill on
// the heartbeat thread would get the node declared lost).
#ifndef SLUICE_STORE_NODE_DISK_TIER_H_
#define SLUICE_STORE_NODE_DISK_TIER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/net.h"
#include "proto/store/v1/master.pb.h"
#include "store/node/disk_index.h"

namespace sluice::internal {

class DiskTier {
 public:
  // The node memory a command names (region key, offset, size), or null
  // when it is outside the node's memory. Called on the tier's thread.
  using Resolve =
      std::function<char*(std::uint64_t region_key, std::uint64_t offset, std::uint64_t size)>;

  // Opens `dir`/sluice-<node>.tier and its index (…tier.index). When both
  // are there from a previous run with the same `bytes`, the file is kept
  // and the objects its index lists are offered by Recovered(); otherwise
  // the file is created (truncated) and `bytes` reserved, and the index
  // starts empty (written before the file is truncated).
  // `bytes_per_s` caps the copy rate (0: none). `on_result` runs on the
  // tier's thread after each command finishes (the node then reports it).
  // Errors: kInvalidArgument (no directory, under 1 MiB, cannot create),
  // kResourceExhausted (the space cannot be reserved), kUnavailable (the
  // index cannot be written).
  static Result<std::unique_ptr<DiskTier>> Open(const std::string& dir, std::uint64_t bytes,
                                                const std::string& node_id,
                                                std::uint64_t bytes_per_s, Resolve resolve,
                                                std::function<void()> on_result);
  // Stops: a running command ends after its current block (its result is
  // dropped; the master resends it to a restarted node anyway), queued ones
  // never run.
  ~DiskTier();

  // Takes the commands of a heartbeat answer (the master resends each until
  // it has seen its result): queues the new ones, forgets results and queued
  // commands the master no longer lists. Heartbeat thread.
  void Update(const google::protobuf::RepeatedPtrField<store::v1::NodeCommand>& commands);
  // Results of finished commands the master still lists, to report.
  std::vector<store::v1::CommandResult> Results();
  // Forgets every command and waits for the running one to end: before the
  // node registers with a (restarted) master, which must not see memory a
  // load still writes as free. Heartbeat thread.
  void Quiesce();

  // Objects on disk from the previous run (empty after the first call):
  // the node registers them with the master. Their region_key is stale.
  std::vector<store::v1::ObjectRecord> TakeRecovered();

  // Keeps the index in step with a heartbeat's directory changes. A failed
  // save is logged (once per failure streak). Heartbeat thread.
  void ApplyDeltas(const google::protobuf::RepeatedPtrField<store::v1::NodeDelta>& deltas);

  // Commands run to the end since the tier opened, and their bytes.
  struct Counters {
    std::uint64_t spills = 0, loads = 0, bytes_spilled = 0, bytes_loaded = 0, failed = 0;
  };
  Counters counters() const {
    MutexLock lock(mu_);
    return counters_;
  }

  std::uint64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  DiskTier(std::uint64_t bytes, std::uint64_t bytes_per_s, Resolve resolve,
           std::function<void()> on_result);
  void Loop();
  store::v1::CommandResult Run(const store::v1::NodeCommand& c);

  const std::uint64_t bytes_;
  const std::uint64_t bytes_per_s_;
  const Resolve resolve_;
  const std::function<void()> on_result_;
  UniqueFd fd_;
  std::string path_;
  std::unique_ptr<DiskIndex> index_;
  std::vector<store::v1::ObjectRecord> recovered_;  // Until TakeRecovered (heartbeat thread).
  bool index_failing_ = false;                      // Heartbeat thread.
  mutable Mutex mu_;
  CondVar cv_;
  Counters counters_ SLUICE_GUARDED_BY(mu_);
  std::deque<store::v1::NodeCommand> queue_ SLUICE_GUARDED_BY(mu_);
  std::set<std::uint64_t> listed_ SLUICE_GUARDED_BY(mu_);  // Ids the master lists.
  std::map<std::uint64_t, store::v1::CommandResult> results_ SLUICE_GUARDED_BY(mu_);
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  bool running_ SLUICE_GUARDED_BY(mu_) = false;  // A command is being copied.
  std::thread thread_;
};

}  // namespace sluice::internal

#endif  // SLUICE_STORE_NODE_DISK_TIER_H_
