// A finished job's timeline from its event stream, for the benchmarks that
// run jobs over the HTTP API: latency, time to first frame, busy seconds
// per stage, and whether it skipped a stage on cached conditions.
#ifndef SLUICE_BENCH_JOB_TIMELINE_H_
#define SLUICE_BENCH_JOB_TIMELINE_H_

#include <httplib.h>

#include <map>
#include <string>

namespace sluice::bench {

struct Timeline {
  bool succeeded = false;
  bool cache_hit = false;  // A stage was skipped: every condition was cached.
  double latency_s = 0, ttff_s = -1;
  std::map<std::string, double> busy_s;  // From stage_started to its next event.
  // From the start of the stage that made the first output (decode) to it;
  // -1: none.
  double first_output_in_stage_s = -1;
  // Per stage (its last run), in ms: "queue" (ready — submitted, or the
  // previous stage done — to started), "busy" (started to done, as the
  // orchestrator saw it), "overhead" (busy less the worker's "run":
  // delivering the assignment, starting the run, reporting it), and the
  // worker's own timings from the stage_done event ("start", "run",
  // "input", "output").
  std::map<std::string, std::map<std::string, double>> stage_ms;
};

// Reads job `id`'s events (GET /v1/jobs/{id}/events, which ends once the
// job finished: call it for a finished job, or it waits). An empty
// timeline when the server does not answer 200.
Timeline ReadTimeline(httplib::Client& http, const std::string& id);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_JOB_TIMELINE_H_
