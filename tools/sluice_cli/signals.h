// Stop signals for the long-running roles of the `sluice` command.
#ifndef SLUICE_TOOLS_SIGNALS_H_
#define SLUICE_TOOLS_SIGNALS_H_

#include <atomic>

namespace sluice::cli {

// Blocks SIGINT/SIGTERM in every thread (call before starting any), so that
// WaitForStopSignal() can take them synchronously.
void BlockStopSignals();
// A thread turns EOF on stdin into SIGTERM (once per process, however often
// it is called).
void StopOnStdinEof();
// Whether SIGINT or SIGTERM is pending (blocked by BlockStopSignals, not yet
// taken): a role still starting up gives up.
bool StopSignalPending();
// Waits for SIGINT or SIGTERM and returns it. With `exit_on_eof`, a thread
// turns EOF on stdin into SIGTERM: helper processes started by tests and
// benchmarks then die with their parent.
int WaitForStopSignal(bool exit_on_eof);
// For short-lived clients: installs SIGINT/SIGTERM handlers that set the
// returned flag (and record the signal in StopSignal()) instead of killing
// the process, so the client can clean up (cancel its job) and exit.
const std::atomic<bool>* StopFlagOnSignals();
// The signal that set the flag; 0 if none.
int StopSignal();

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SIGNALS_H_
