// The web console's side of the HTTP API: its files and the live cluster
// stream its cluster view reads.
#ifndef SLUICE_ORCHESTRATOR_SERVICE_HTTP_CONSOLE_H_
#define SLUICE_ORCHESTRATOR_SERVICE_HTTP_CONSOLE_H_

#include <chrono>
#include <memory>

#include "http/router.h"
#include "http/server.h"
#include "orchestrator/service/orchestrator_state.h"

namespace sluice::orchestrator {

// Serves the console (orchestrator/console/web, built into the binary) at
// GET /console, /console/ (the page) and /console/{file}, to anyone: the
// page holds no data, and asks for an API key when the API needs one.
// Every answer forbids other origins' scripts, framing and type sniffing.
void InstallConsoleFiles(http::Router& router);

// Answers `ex` with server-sent events: `event: cluster` with
// ClusterJson(state.Stats()) at once, then again whenever it differs,
// looked at every `period`, until the client leaves. `state` must outlive
// the server.
void StreamCluster(OrchestratorState& state, std::shared_ptr<http::Exchange> ex,
                   std::chrono::milliseconds period);

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_HTTP_CONSOLE_H_
