// `sluice bench http`: the HTTP front under client load. A `sluice serve`
// process (profile stages) holds `connections` idle connections, `sse`
// event streams and `sync` waiting synchronous requests while the run
// measures /healthz latency (against the same probes with nothing open,
// measured first), the server's resident memory per idle connection, and
// how many async submissions per second it answers (202 accepted or 429
// queue full) from `submit_threads` keep-alive clients.
#ifndef SLUICE_BENCH_HTTP_BENCH_H_
#define SLUICE_BENCH_HTTP_BENCH_H_

#include <string>

#include "sluice/status.h"

namespace sluice::bench {

struct HttpBenchOptions {
  int connections = 2000;  // Idle connections.
  int sse = 500;           // Event streams on one long job.
  int sync = 200;          // Synchronous requests left waiting.
  int probes = 200;        // /healthz probes per phase.
  int submit_threads = 4;
  double submit_seconds = 2;
  std::string stages = "flux-1024";
};

struct HttpBenchResult {
  HttpBenchOptions options;
  double idle_rss_bytes_per_connection = 0;
  double rss_delta_mib_loaded = 0;  // Server RSS growth with every client open.
  double healthz_p50_ms_unloaded = 0, healthz_p99_ms_unloaded = 0;
  double healthz_p50_ms = 0, healthz_p99_ms = 0;
  double healthz_p99_ratio = 0;  // Loaded over unloaded.
  double submissions_per_s = 0;  // Answered 202 or 429.
  long accepted = 0, rejected = 0, errors = 0;
};

// `self` is the sluice binary (the server runs as its `serve`).
// Errors: kInvalidArgument (bad option); kUnavailable (the server did not
// start or a connection failed).
Result<HttpBenchResult> RunHttpBench(const HttpBenchOptions& o, const std::string& self);
std::string ToJson(const HttpBenchResult& r);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_HTTP_BENCH_H_
