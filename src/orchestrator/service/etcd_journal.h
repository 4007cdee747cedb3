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
// Prune reads nothing from etcd.
//
// Writes leave the caller's lock: one writer thread commits what is queued
// as few transactions as etcd's limits allow (100 writes, 1 MiB each), so
// a busy orchestrator pays about one round trip per batch, not per write.
// Add waits for its transaction (a submission is acknowledged only once
// it is in etcd; concurrent Adds share one); SaveProgress, Finish, Keep,
// Prune and Drop are queued and return at once, their failures logged.
// Thread-safe.
#ifndef SLUICE_ORCHESTRATOR_SERVICE_ETCD_JOURNAL_H_
#define SLUICE_ORCHESTRATOR_SERVICE_ETCD_JOURNAL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
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

  // Waits for the queued writes (at most the etcd client's timeout per
  // transaction), then stops the writer.
  ~EtcdJournal() override;

  // Add fails with kFailedPrecondition once this process no longer leads,
  // and with etcd's kUnavailable while it cannot be reached; as with
  // SQLite, a failed Add refuses the submission. Its request is copied.
  Status Add(JobId id, const JobRequest& r, const std::vector<StageDecl>& model_stages) override;
  // The writes below are queued (their data copied) and return Ok at once,
  // or kUnavailable when 4,096 writes or 64 MiB already wait for etcd, or
  // kFailedPrecondition once a write found this process no longer leads
  // (the fence's lease does not come back). A queued write that fails is
  // logged and reported by the next Flush; one that timed out may still be
  // applied by etcd later (as with any etcd call). While etcd does not
  // answer, the writes queued with the first that timed out fail with it
  // unsent.
  Status SaveProgress(JobId id, const JobProgress& p) override;
  // The result is copied into etcd when it is at most max_result_bytes.
  Status Finish(JobId id, const JobOutcome& outcome) override;
  // Reads (Unfinished, Finished) first wait for the queued writes.
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
  bool concurrent() const override { return true; }
  Status Drop(JobId id) override;

  // Waits until every write queued so far is committed or failed; the
  // first failure of a queued write since the last Flush, or Ok.
  Status Flush();
  // Transactions sent to etcd so far (batched writes share one).
  std::uint64_t transactions() const { return transactions_.load(); }

 private:
  // One call's writes: committed together, in queue order.
  struct Group {
    std::vector<discovery::EtcdWrite> writes;
    std::string what;
    std::size_t bytes = 0;
    std::uint64_t seq = 0;
    bool waited = false;  // Add: its status goes to results_.
  };
  EtcdJournal(discovery::EtcdClient* etcd, Options o) : etcd_(etcd), o_(std::move(o)) {}
  Status Load();
  std::string Key(const char* kind, JobId id) const;
  // One fenced transaction.
  Status Write(const std::vector<discovery::EtcdWrite>& writes, const std::string& what);
  // Queues `writes`; with `wait`, returns once they are committed (their
  // status), else at once.
  Status Enqueue(std::vector<discovery::EtcdWrite> writes, std::string what, bool wait);
  // The writer thread: commits queued groups in packed transactions.
  void Run();
  // Commits groups [begin, end) of `batch` as one transaction, or each
  // alone when that fails for another reason than the fence; their
  // statuses into `out`.
  void Commit(const std::vector<Group>& batch, std::size_t begin, std::size_t end,
              std::vector<Status>* out);
  // Forgets job `id` in etcd and in the index.
  void ForgetWrites(JobId id, std::vector<discovery::EtcdWrite>* writes);

  discovery::EtcdClient* const etcd_;
  const Options o_;
  Mutex mu_;
  CondVar cv_;  // Queue, completion and stop.
  JobId max_id_ SLUICE_GUARDED_BY(mu_) = 0;
  std::map<JobId, std::int64_t> finished_ SLUICE_GUARDED_BY(mu_);  // id -> finished_unix_s.
  // (job, step) -> unix_ms.
  std::map<std::pair<JobId, int>, std::int64_t> kept_ SLUICE_GUARDED_BY(mu_);
  std::deque<Group> queue_ SLUICE_GUARDED_BY(mu_);
  std::size_t queued_bytes_ SLUICE_GUARDED_BY(mu_) = 0;
  std::uint64_t enqueued_ SLUICE_GUARDED_BY(mu_) = 0;               // Last group's seq.
  std::uint64_t done_ SLUICE_GUARDED_BY(mu_) = 0;                   // Every group up to it is done.
  std::map<std::uint64_t, Status> results_ SLUICE_GUARDED_BY(mu_);  // Waited groups'.
  Status unreported_ SLUICE_GUARDED_BY(mu_);  // First queued failure since Flush.
  bool fenced_out_ SLUICE_GUARDED_BY(mu_) = false;
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  std::atomic<std::uint64_t> transactions_{0};
  std::thread writer_;  // Last: started once the rest exists.
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_ETCD_JOURNAL_H_
