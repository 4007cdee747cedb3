// The orchestrator's worker protocol (proto/orchestrator/v1) to and from the
// plain reports its state takes (orchestrator/core/worker_reports.h).
// Reports hold views into the message they came from: it must outlive them.
#ifndef SLUICE_ORCHESTRATOR_SERVICE_WORKER_MESSAGES_H_
#define SLUICE_ORCHESTRATOR_SERVICE_WORKER_MESSAGES_H_

#include "orchestrator/core/worker_reports.h"
#include "proto/orchestrator/v1/orchestrator.pb.h"

namespace sluice::orchestrator {

HeartbeatReport FromWire(const v1::HeartbeatRequest& m);
DoneReport FromWire(const v1::DoneRequest& m);
// A worker from before status codes sends only `retryable`; a code above
// the known ones reads as kInternal. Retryable: kUnavailable and
// kResourceExhausted.
FailedReport FromWire(const v1::FailedRequest& m);
v1::Assignment ToWire(const AssignmentOrder& a);

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_WORKER_MESSAGES_H_
