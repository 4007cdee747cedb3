// The orchestrator's journal in etcd, for a leader and standbys on
// different hosts (`sluice orchestrator --etcd --journal-in-etcd`): the
// standby that takes over reads every accepted job here and runs it on.
// SQLite (journal.h) stays the embedded default.
//
// Keys under the prefix P (ids zero-padded to 20 digits, so key order is
// id order):
//   P job/<id>          the request, as accepted (JSON)
//   P progress/<id>     how far it got (JSON; dropped when it finishes)
//   P done/<id>         its outcome (JSON), once finished
//   P result/<id>       a succeeded job's result bytes, up to a size
//   P kept/<id>/<step>  a step kept for edit and resume (its report time)
// Every write is one transaction fenced by the leader's key: once another
// orchestrator leads, this one's writes fail (kFailedPrecondition) rather
// than interleave with the new leader's.
//
// Finished jobs and kept steps are indexed in memory (loaded at Open), so
// Prune reads nothing from etcd. Not thread-safe: the caller serializes
// (OrchestratorState's lock); each call is one or a few round trips to
// etcd (an accepted job costs one write, each finished stage one, its end
// one).
#ifndef SLUICE_ORCHESTRATOR_SERVICE_ETCD_JOURNAL_H_
#define SLUICE_ORCHESTRATOR_SERVICE_ETCD_JOURNAL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "discovery/etcd_client.h"
#include "orchestrator/service/orchestrator_state.h"

namespace sluice::orchestrator {

class EtcdJournal : public JobJournal {
 public:
  struct Options {
    std::string prefix;  // Ends with '/'.
    // Writes succeed only while `fence_key` is held under `fence_lease`
    // (EtcdClient::Txn); empty: unfenced (a single orchestrator).
    std::string fence_key;
    std::int64_t fence_lease = 0;
    // A succeeded job's result is kept in etcd up to this size; a larger
    // one is served by this process only (a standby that takes over
    // answers that it is no longer kept). Under etcd's request limit.
    std::size_t max_result_bytes = std::size_t{1} << 20;
  };

  // Reads the index of finished jobs and kept steps. `etcd` must outlive
  // the journal. Errors: kInvalidArgument (prefix without a trailing '/',
  // max_result_bytes over 1 MiB); etcd's (kUnavailable).
  static Result<std::unique_ptr<EtcdJournal>> Open(discovery::EtcdClient* etcd, Options o);

  // Every write below fails with kFailedPrecondition once this process no
  // longer leads, and with etcd's kUnavailable while it cannot be reached;
  // as with SQLite, a failed Add refuses the submission and any other
  // failure is logged by the caller.
  Status Add(JobId id, const JobRequest& r, const std::vector<StageDecl>& model_stages) override;
  Status SaveProgress(JobId id, const JobProgress& p) override;
  // The result is copied into etcd when it is at most max_result_bytes.
  Status Finish(JobId id, const JobOutcome& outcome) override;
  Result<std::vector<JournaledJob>> Unfinished() override;
  // A succeeded job whose result was not kept comes back with
  // result_dropped set.
  Result<std::vector<FinishedRecord>> Finished(std::size_t keep,
                                               std::int64_t since_unix_s) override;
  Status Keep(const KeptCheckpoint& k) override;
  Result<std::vector<KeptCheckpoint>> Kept() override;
  Status Prune(std::size_t keep, std::int64_t since_unix_s,
               std::int64_t kept_since_unix_ms) override;
  Result<JobId> MaxId() override;

 private:
  EtcdJournal(discovery::EtcdClient* etcd, Options o) : etcd_(etcd), o_(std::move(o)) {}
  Status Load();
  std::string Key(const char* kind, JobId id) const;
  // One fenced transaction.
  Status Write(const std::vector<discovery::EtcdWrite>& writes, const std::string& what);
  // Forgets job `id` in etcd and in the index.
  void ForgetWrites(JobId id, std::vector<discovery::EtcdWrite>* writes);

  discovery::EtcdClient* const etcd_;
  const Options o_;
  JobId max_id_ = 0;
  std::map<JobId, std::int64_t> finished_;              // id -> finished_unix_s.
  std::map<std::pair<JobId, int>, std::int64_t> kept_;  // (job, step) -> unix_ms.
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_ETCD_JOURNAL_H_
