// A worker's session with the orchestrator. Register answers with a worker
// id (random, not guessable) and a session secret; every later call of
// that registration (Heartbeat, Assignments, Done, Failed, Unregister)
// carries a proof under the secret (common/call_mac.h: a MAC over the
// method, the time and a nonce) in kWorkerMacMetadataKey. A call naming a
// worker id without its proof is PERMISSION_DENIED, so holding the cluster
// credential is not enough to act as another worker (declare it lost,
// forge its reports).
#ifndef SLUICE_ORCHESTRATOR_CORE_WORKER_SESSION_H_
#define SLUICE_ORCHESTRATOR_CORE_WORKER_SESSION_H_

#include <cstddef>
#include <string_view>

namespace sluice::orchestrator {

inline constexpr const char* kWorkerMacMetadataKey = "x-sluice-worker-mac";
// Bytes of a session secret.
inline constexpr std::size_t kSessionSecretBytes = 32;

// The method names a session proof is made for (what CallVerifier checks).
namespace worker_method {
inline constexpr std::string_view kHeartbeat = "/sluice.orchestrator.v1.Orchestrator/Heartbeat";
inline constexpr std::string_view kAssignments = "/sluice.orchestrator.v1.Orchestrator/Assignments";
inline constexpr std::string_view kDone = "/sluice.orchestrator.v1.Orchestrator/Done";
inline constexpr std::string_view kFailed = "/sluice.orchestrator.v1.Orchestrator/Failed";
inline constexpr std::string_view kUnregister = "/sluice.orchestrator.v1.Orchestrator/Unregister";
}  // namespace worker_method

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CORE_WORKER_SESSION_H_
