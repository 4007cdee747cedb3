#include "orchestrator/service/worker_messages.h"

namespace sluice::orchestrator {
namespace {

std::vector<StepReport> Steps(const google::protobuf::RepeatedPtrField<v1::StepProgress>& in) {
  std::vector<StepReport> out;
  out.reserve(static_cast<std::size_t>(in.size()));
  for (const v1::StepProgress& p : in) {
    out.push_back(
        {p.job_id(), p.step(), p.steps(), p.checkpointed(), p.preview(), p.preview_step()});
  }
  return out;
}

}  // namespace

HeartbeatReport FromWire(const v1::HeartbeatRequest& m) {
  HeartbeatReport r;
  r.worker = m.worker_id();
  r.free_slots = m.free_slots();
  r.progress = Steps(m.progress());
  r.first_output.assign(m.first_output().begin(), m.first_output().end());
  if (m.has_reports()) {
    r.reports = m.reports();
  }
  r.draining = m.draining();
  for (const v1::CacheCounters& c : m.caches()) {
    r.caches.push_back({c.kind(), c.lookups(), c.hits(), c.misses(), c.computes(),
                        c.single_flight_waits(), c.takeovers(), c.bytes_inserted()});
  }
  for (const v1::TransportCounters& t : m.transports()) {
    r.transports.push_back({t.transport(), t.bytes_read(), t.bytes_written()});
  }
  return r;
}

DoneReport FromWire(const v1::DoneRequest& m) {
  DoneReport r;
  r.worker = m.worker_id();
  r.job = m.job_id();
  r.output = m.output();
  r.output_type = m.output_type();
  r.payload_keys.assign(m.payload_keys().begin(), m.payload_keys().end());
  r.progress = Steps(m.progress());
  r.first_output = m.first_output();
  r.timings_ms.insert(m.timings_ms().begin(), m.timings_ms().end());
  r.counts.insert(m.counts().begin(), m.counts().end());
  if (m.reports_held()) {
    r.held.emplace(m.held().begin(), m.held().end());
  }
  return r;
}

FailedReport FromWire(const v1::FailedRequest& m) {
  FailedReport r;
  r.worker = m.worker_id();
  r.job = m.job_id();
  r.reason = m.reason();
  r.preempted = m.preempted();
  if (m.code() == 0) {
    r.retryable = m.retryable();
  } else {
    r.code = m.code() <= static_cast<std::uint32_t>(kMaxStatusCode)
                 ? static_cast<StatusCode>(m.code())
                 : StatusCode::kInternal;
    r.retryable = RetryableCode(r.code);
  }
  return r;
}

v1::Assignment ToWire(const AssignmentOrder& a) {
  v1::Assignment out;
  switch (a.kind) {
    case AssignmentOrder::Kind::kRun:
      out.set_kind(v1::Assignment::RUN);
      break;
    case AssignmentOrder::Kind::kStop:
      out.set_kind(v1::Assignment::STOP);
      break;
    case AssignmentOrder::Kind::kCheckpoint:
      out.set_kind(v1::Assignment::CHECKPOINT);
      break;
  }
  out.set_job_id(a.job);
  out.set_stage(a.stage);
  out.set_model(a.model);
  out.set_resume_step(a.resume_step);
  out.set_job_name(a.job_name);
  switch (a.priority) {
    case PriorityClass::kInteractive:
      out.set_priority(v1::Assignment::INTERACTIVE);
      break;
    case PriorityClass::kStandard:
      out.set_priority(v1::Assignment::STANDARD);
      break;
    case PriorityClass::kBatch:
      out.set_priority(v1::Assignment::BATCH);
      break;
  }
  out.set_request_json(a.request_json);
  out.set_input(a.input);
  return out;
}

}  // namespace sluice::orchestrator
