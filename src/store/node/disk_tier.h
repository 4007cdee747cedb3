// A store node's disk tier: one preallocated file, and a thread that runs
// the master's spill (memory -> disk) and load (disk -> memory) commands,
// so that the node's heartbeats never wait for the disk (a long spill on
// the heartbeat thread would get the node declared lost).
#ifndef SLUICE_STORE_NODE_DISK_TIER_H_
#define SLUICE_STORE_NODE_DISK_TIER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/net.h"
#include "proto/master.pb.h"

namespace sluice::internal {

class DiskTier {
 public:
  // The node memory a command names (region key, offset, size), or null
  // when it is outside the node's memory. Called on the tier's thread.
  using Resolve =
      std::function<char*(std::uint64_t region_key, std::uint64_t offset, std::uint64_t size)>;

  // Creates (truncating) and reserves `bytes` in `dir`/sluice-<node>.tier.
  // `bytes_per_s` caps the copy rate (0: none). `on_result` runs on the
  // tier's thread after each command finishes (the node then reports it).
  // Errors: kInvalidArgument (no directory, under 1 MiB, cannot create),
  // kResourceExhausted (the space cannot be reserved).
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

  std::uint64_t bytes() const { return bytes_; }

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
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<store::v1::NodeCommand> queue_;  // Guarded by mu_.
  std::set<std::uint64_t> listed_;            // Ids the master lists. Guarded by mu_.
  std::map<std::uint64_t, store::v1::CommandResult> results_;  // Guarded by mu_.
  bool stopping_ = false;                                      // Guarded by mu_.
  bool running_ = false;  // A command is being copied. Guarded by mu_.
  std::thread thread_;
};

}  // namespace sluice::internal

#endif  // SLUICE_STORE_NODE_DISK_TIER_H_
