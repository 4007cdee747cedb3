#include "bench/journal_bench.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "common/random.h"
#include "discovery/etcd_client.h"
#include "orchestrator/service/etcd_journal.h"
#include "orchestrator/service/journal.h"

namespace sluice::bench {
namespace {

using BenchClock = std::chrono::steady_clock;

// Times spent in one journal: submissions apart, whole jobs together.
struct Tally {
  std::vector<double> submit_us;
  double submit_s = 0;
  double total_s = 0;
  int jobs = 0;
};

// Runs jobs [first, first + n) through `j` as the orchestrator would.
Status RunJobs(orchestrator::JobJournal& j, std::uint64_t first, int n, std::size_t result_bytes,
               Tally* t) {
  using namespace orchestrator;
  const std::vector<StageDecl> stages = *ParsePipeline("encode,denoise,decode");
  const std::string result(result_bytes, 'r');
  for (int i = 0; i < n; ++i) {
    const JobId id = first + static_cast<JobId>(i);
    JobRequest r;
    r.name = "job-bench-" + std::to_string(id);
    r.request_json = R"({"prompt":"a lighthouse at dusk, oil on canvas","size":"1024x1024"})";
    r.model = "ref";
    r.pipeline = {"encode", "denoise", "decode"};
    const auto t0 = BenchClock::now();
    SLUICE_RETURN_IF_ERROR(j.Add(id, r, stages));
    const auto t1 = BenchClock::now();
    JobProgress p;
    p.keys = {"payload/" + std::to_string(id) + "/cond"};
    p.output = R"({"descriptor":"..."})";
    p.done = "encode";
    SLUICE_RETURN_IF_ERROR(j.SaveProgress(id, p));
    p.done = "denoise";
    SLUICE_RETURN_IF_ERROR(j.SaveProgress(id, p));
    JobOutcome o;
    o.status = orchestrator::JobStatus::kSucceeded;
    o.result_type = "image/png";
    o.result = result;
    o.finished_unix_s = 1;
    SLUICE_RETURN_IF_ERROR(j.Finish(id, o));
    const auto t2 = BenchClock::now();
    const double submit = std::chrono::duration<double>(t1 - t0).count();
    t->submit_us.push_back(submit * 1e6);
    t->submit_s += submit;
    t->total_s += std::chrono::duration<double>(t2 - t0).count();
    ++t->jobs;
  }
  return Status::Ok();
}

}  // namespace

Result<JournalBenchResult> RunJournalBench(const JournalBenchOptions& o) {
  if (o.etcd.empty()) {
    return InvalidArgumentError("--etcd: the URL of a running etcd is needed");
  }
  if (o.jobs < 4 || o.jobs > 100000) {
    return InvalidArgumentError("--jobs must be in 4..100000");
  }
  if (o.rounds < 1 || o.rounds > 100) {
    return InvalidArgumentError("--rounds must be in 1..100");
  }
  if (o.threads < 1 || o.threads > 64) {
    return InvalidArgumentError("--threads must be in 1..64");
  }
  if (o.result_bytes > (std::size_t{1} << 20)) {
    return InvalidArgumentError("--result-bytes must be at most 1 MiB (what etcd keeps)");
  }
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> urls, discovery::ParseEtcdEndpoints(o.etcd));
  SLUICE_ASSIGN_OR_RETURN(auto etcd,
                          discovery::EtcdClient::Create(urls, std::chrono::milliseconds(5000)));
  // A prefix of this run's own, removed at the end; a SQLite file likewise.
  std::uint64_t salt = 0;
  internal::RandomBytes(&salt, sizeof salt);
  const std::string prefix = "/sluice-bench/" + std::to_string(salt) + "/journal/";
  orchestrator::EtcdJournal::Options jo;
  jo.prefix = prefix;
  SLUICE_ASSIGN_OR_RETURN(auto in_etcd, orchestrator::EtcdJournal::Open(etcd.get(), jo));
  char tmpl[] = "/tmp/sluice-bench-journal-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) {
    return UnavailableError("cannot create a temporary file for the SQLite journal",
                            FailureScope::kEndpoint);
  }
  ::close(fd);
  const std::string path = tmpl;
  Result<std::unique_ptr<orchestrator::Journal>> in_sqlite = orchestrator::Journal::Open(path);
  Tally sqlite, in_etcd_tally;
  Status st = in_sqlite.status();
  // Alternating rounds, so both see the same noise on a shared host.
  const int per_round = std::max(1, o.jobs / o.rounds);
  for (int round = 0; st.ok() && round < o.rounds; ++round) {
    const std::uint64_t first = 1 + static_cast<std::uint64_t>(round * per_round);
    st = RunJobs(**in_sqlite, first, per_round, o.result_bytes, &sqlite);
    if (st.ok()) {
      st = RunJobs(*in_etcd, first, per_round, o.result_bytes, &in_etcd_tally);
    }
    if (st.ok()) {  // The queued writes land within the run's time.
      const auto t0 = BenchClock::now();
      st = in_etcd->Flush();
      in_etcd_tally.total_s += std::chrono::duration<double>(BenchClock::now() - t0).count();
    }
  }
  // `threads` submitters at once on the etcd journal, ids after the above.
  Tally concurrent;
  double concurrent_s = 0;
  if (st.ok()) {
    const int per_thread = std::max(1, o.jobs / o.threads);
    std::vector<Tally> tallies(static_cast<std::size_t>(o.threads));
    std::vector<Status> results(static_cast<std::size_t>(o.threads));
    std::vector<std::thread> threads;
    const auto t0 = BenchClock::now();
    for (int t = 0; t < o.threads; ++t) {
      const std::uint64_t first =
          1 + static_cast<std::uint64_t>(o.jobs) + static_cast<std::uint64_t>(t) * per_thread;
      threads.emplace_back([&, t, first] {
        results[t] = RunJobs(*in_etcd, first, per_thread, o.result_bytes, &tallies[t]);
      });
    }
    for (std::thread& t : threads) {
      t.join();
    }
    st = in_etcd->Flush();
    concurrent_s = std::chrono::duration<double>(BenchClock::now() - t0).count();
    for (int t = 0; t < o.threads; ++t) {
      st = st.ok() ? results[t] : st;
      concurrent.jobs += tallies[t].jobs;
      concurrent.submit_us.insert(concurrent.submit_us.end(), tallies[t].submit_us.begin(),
                                  tallies[t].submit_us.end());
    }
  }
  (void)etcd->Txn({{discovery::EtcdWrite::Kind::kDeletePrefix,
                    "/sluice-bench/" + std::to_string(salt) + "/",
                    {}}});
  if (in_sqlite.ok()) {
    in_sqlite->reset();  // Closed before its files go.
  }
  for (const char* suffix : {"", "-wal", "-shm"}) {
    ::unlink((path + suffix).c_str());
  }
  SLUICE_RETURN_IF_ERROR(st);
  JournalBenchResult r;
  r.options = o;
  r.sqlite_submits_per_s = sqlite.jobs / sqlite.submit_s;
  r.etcd_submits_per_s = in_etcd_tally.jobs / in_etcd_tally.submit_s;
  r.sqlite_jobs_per_s = sqlite.jobs / sqlite.total_s;
  r.etcd_jobs_per_s = in_etcd_tally.jobs / in_etcd_tally.total_s;
  r.sqlite_submit_p50_us = Percentile(sqlite.submit_us, 0.5);
  r.sqlite_submit_p99_us = Percentile(sqlite.submit_us, 0.99);
  r.etcd_submit_p50_us = Percentile(in_etcd_tally.submit_us, 0.5);
  r.etcd_submit_p99_us = Percentile(in_etcd_tally.submit_us, 0.99);
  r.etcd_concurrent_jobs_per_s = concurrent_s > 0 ? concurrent.jobs / concurrent_s : 0.0;
  r.etcd_concurrent_submit_p99_us = Percentile(concurrent.submit_us, 0.99);
  return r;
}

std::string ToJson(const JournalBenchResult& r) {
  nlohmann::json j;
  j["jobs"] = r.options.jobs;
  j["rounds"] = r.options.rounds;
  j["threads"] = r.options.threads;
  j["result_bytes"] = r.options.result_bytes;
  j["sqlite_submits_per_s"] = r.sqlite_submits_per_s;
  j["etcd_submits_per_s"] = r.etcd_submits_per_s;
  j["submit_ratio"] =
      r.sqlite_submits_per_s > 0 ? r.etcd_submits_per_s / r.sqlite_submits_per_s : 0.0;
  j["sqlite_jobs_per_s"] = r.sqlite_jobs_per_s;
  j["etcd_jobs_per_s"] = r.etcd_jobs_per_s;
  j["jobs_ratio"] = r.sqlite_jobs_per_s > 0 ? r.etcd_jobs_per_s / r.sqlite_jobs_per_s : 0.0;
  j["sqlite_submit_p50_us"] = r.sqlite_submit_p50_us;
  j["sqlite_submit_p99_us"] = r.sqlite_submit_p99_us;
  j["etcd_submit_p50_us"] = r.etcd_submit_p50_us;
  j["etcd_submit_p99_us"] = r.etcd_submit_p99_us;
  j["etcd_concurrent_jobs_per_s"] = r.etcd_concurrent_jobs_per_s;
  j["etcd_concurrent_submit_p99_us"] = r.etcd_concurrent_submit_p99_us;
  return j.dump();
}

}  // namespace sluice::bench
