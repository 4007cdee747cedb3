// What workers tell the orchestrator (heartbeats, a stage's result or
// failure) and what it tells them (assignments), as plain values: the
// orchestrator's state takes and gives these; the service translates them
// to and from the wire (service/worker_messages.h). Byte fields that can be
// large (a stage's output, a preview) are views into the caller's message,
// valid for the call they are passed to; the state copies what it keeps.
#ifndef SLUICE_ORCHESTRATOR_CORE_WORKER_REPORTS_H_
#define SLUICE_ORCHESTRATOR_CORE_WORKER_REPORTS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

#include "orchestrator/core/policy.h"

namespace sluice::orchestrator {

// A job's step on a worker.
struct StepReport {
  JobId job = 0;
  std::uint32_t step = 0;
  std::uint32_t steps = 0;
  bool checkpointed = false;  // A checkpoint of `step` is stored.
  std::string_view preview;   // A PNG of the latent so far, or empty.
  std::uint32_t preview_step = 0;
};

// A worker's cache counters of one kind ("condition", "feature", ...):
// totals since it started.
struct CacheReport {
  std::string_view kind;
  std::uint64_t lookups = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t computes = 0;
  std::uint64_t single_flight_waits = 0;
  std::uint64_t takeovers = 0;
  std::uint64_t bytes_inserted = 0;
};

// A worker's bytes moved by one transport, totals since it started.
struct TransportReport {
  std::string_view transport;
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
};

struct HeartbeatReport {
  WorkerId worker = 0;
  std::uint32_t free_slots = 0;
  std::vector<StepReport> progress;
  std::vector<JobId> first_output;  // Jobs whose first output went out.
  // Done and Failed reports the worker had sent when it counted its free
  // slots (absent from workers that do not count them).
  std::optional<std::uint64_t> reports;
  bool draining = false;  // Take no more work.
  std::vector<CacheReport> caches;
  std::vector<TransportReport> transports;
};

// A stage finished its job.
struct DoneReport {
  WorkerId worker = 0;
  JobId job = 0;
  std::string_view output;                // The next stage's input, or the final result.
  std::string_view output_type;           // The final stage's MIME type.
  std::vector<std::string> payload_keys;  // Store keys the output holds.
  std::vector<StepReport> progress;       // Since the last heartbeat.
  bool first_output = false;
  std::map<std::string, double> timings_ms;    // As sent; the state checks them.
  std::map<std::string, std::int64_t> counts;  // As sent; the state checks them.
  // What the worker holds after the run, when it reported it (DoneRequest
  // held / reports_held); as sent, the state checks them.
  std::optional<std::vector<std::string>> held;
};

// Whether a stage failure with `code` may succeed on another attempt (the
// worker's report and the orchestrator's retry agree on it).
constexpr bool RetryableCode(StatusCode code) {
  return code == StatusCode::kUnavailable || code == StatusCode::kResourceExhausted;
}

// A stage gave its job back: failed, or yielded after a checkpoint order.
struct FailedReport {
  WorkerId worker = 0;
  JobId job = 0;
  std::string_view reason;
  bool preempted = false;                   // Yielded after kCheckpoint (not a failure).
  StatusCode code = StatusCode::kInternal;  // kInternal when none was sent.
  bool retryable = false;                   // Another attempt may succeed.
};

// An order for a worker.
struct AssignmentOrder {
  enum class Kind : std::uint8_t {
    kRun,         // Run `stage` of `job`.
    kStop,        // Stop `job` at its next step boundary (cancelled).
    kCheckpoint,  // Checkpoint `job` at its next step, then yield.
  };
  Kind kind = Kind::kRun;
  JobId job = 0;
  std::string stage;
  std::string model;
  std::uint32_t resume_step = 0;                      // kRun: continue from this checkpointed step.
  std::string job_name;                               // kRun: the job's public id.
  PriorityClass priority = PriorityClass::kStandard;  // kRun: the job's class.
  std::string request_json;                           // kRun: the job's request.
  std::string input;                                  // kRun: the previous stage's output, if any.
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_WORKER_REPORTS_H_
