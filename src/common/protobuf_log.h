// Protobuf's own log lines (one per malformed field a peer sends, e.g. a
// string field that is not UTF-8) routed through sluice's logger, at most
// one line a second with a count of those dropped: a peer sending bad
// messages in a loop cannot flood the log.
#ifndef SLUICE_COMMON_PROTOBUF_LOG_H_
#define SLUICE_COMMON_PROTOBUF_LOG_H_

namespace sluice::internal {

// Installs the process-wide protobuf log handler. Idempotent, thread-safe.
// Servers that parse peers' messages (store master, orchestrator) call it
// when they start.
void RouteProtobufLogs();

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_PROTOBUF_LOG_H_
