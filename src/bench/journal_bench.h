// `sluice bench journal`: how many submissions and whole jobs per second
// the orchestrator's journal sustains, in etcd (what a standby reads after
// a takeover) against SQLite (the embedded default) in the same run. Per
// job: Add (the submission, before it is acknowledged), two SaveProgress
// (stages done), Finish (with a `result_bytes` result, 64 KiB by default). One submitter alone
// (SQLite is written under the orchestrator's lock: its ceiling), then etcd with `threads`
// submitters at once, as concurrent clients reach an orchestrator (the etcd journal is written
// outside the lock and batches what is queued into shared transactions). A run's time includes
// waiting for its queued writes to land.
#ifndef SLUICE_BENCH_JOURNAL_BENCH_H_
#define SLUICE_BENCH_JOURNAL_BENCH_H_

#include <cstdint>
#include <string>

#include "sluice/status.h"

namespace sluice::bench {

struct JournalBenchOptions {
  std::string etcd;  // "http://host:port[,...]" of a running etcd.
  int jobs = 400;    // Per journal, split over alternating rounds.
  int rounds = 4;
  int threads = 8;                      // Concurrent submitters on the etcd journal.
  std::size_t result_bytes = 64 << 10;  // Each job's result, kept in the journal.
};

struct JournalBenchResult {
  JournalBenchOptions options;
  double sqlite_submits_per_s = 0;  // Add alone.
  double etcd_submits_per_s = 0;
  double sqlite_jobs_per_s = 0;  // A job's whole journal life.
  double etcd_jobs_per_s = 0;
  double sqlite_submit_p50_us = 0, sqlite_submit_p99_us = 0;
  double etcd_submit_p50_us = 0, etcd_submit_p99_us = 0;
  // With `threads` submitters.
  double etcd_concurrent_jobs_per_s = 0;
  double etcd_concurrent_submit_p99_us = 0;
};

// Errors: kInvalidArgument (no etcd, jobs outside 4..100000, rounds
// outside 1..100, threads outside 1..64, result_bytes over 1 MiB); the journals' (etcd unreachable:
// kUnavailable).
Result<JournalBenchResult> RunJournalBench(const JournalBenchOptions& o);
std::string ToJson(const JournalBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_JOURNAL_BENCH_H_
