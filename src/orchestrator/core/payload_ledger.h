// Who owns each payload in the object store: the keys of every job's
// stage outputs, which (job, stage) a key belongs to, and the keys nobody
// needs any more, queued for the store's garbage collection. A plain
// table, not thread safe: its owner (the service's state) calls it under
// its own lock. Keys are copied in; nothing here touches the store.
#ifndef SLUICE_ORCHESTRATOR_CORE_PAYLOAD_LEDGER_H_
#define SLUICE_ORCHESTRATOR_CORE_PAYLOAD_LEDGER_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "orchestrator/core/policy.h"

namespace sluice::orchestrator {

class PayloadLedger {
 public:
  // Records `keys` as the output of `job`'s stage `stage`. Keys recorded
  // for that stage before are disowned without being released (a re-run
  // replaces an output that was lost).
  void Record(JobId job, const std::string& stage, std::vector<std::string> keys);
  // Releases the keys of `job`'s stage `stage` (none recorded: nothing).
  void Release(JobId job, const std::string& stage);
  // Releases every stage's keys of `job`.
  void ReleaseJob(JobId job);
  // Releases `key` unless some stage of a job owns it (a report nobody
  // takes: its payload is garbage unless it is also a live job's).
  void ReleaseUnlessOwned(const std::string& key);
  // Releases keys no stage owns (a journaled output a restarted job no
  // longer uses).
  void ReleaseKeys(const std::vector<std::string>& keys);
  // Forgets the keys of `job`'s stage `stage` without releasing them (the
  // payload is lost: there is nothing to delete).
  void Drop(JobId job, const std::string& stage);
  // Forgets that `key` is owned, releasing nothing.
  void Disown(const std::string& key) { owner_.erase(key); }
  // The (job, stage) owning `key`, if any.
  std::optional<std::pair<JobId, std::string>> Owner(const std::string& key) const;
  // Hands over the keys released since the last call, in release order.
  std::vector<std::string> TakeReleased() { return std::exchange(released_, {}); }
  // Keys owned now.
  std::size_t owned() const { return owner_.size(); }

 private:
  // Removes the keys of `job`'s stage `stage` from the ledger (none: {})
  // and hands them over, disowned and not released.
  std::vector<std::string> Take(JobId job, const std::string& stage);

  std::map<JobId, std::map<std::string, std::vector<std::string>>>
      by_job_;                                                  // job -> stage -> keys.
  std::map<std::string, std::pair<JobId, std::string>> owner_;  // key -> (job, stage).
  std::vector<std::string> released_;
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_PAYLOAD_LEDGER_H_
