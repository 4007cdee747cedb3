// Stop signals for the long-running roles of the `sluice` command.
#ifndef SLUICE_TOOLS_SIGNALS_H_
#define SLUICE_TOOLS_SIGNALS_H_

namespace sluice::cli {

// Blocks SIGINT/SIGTERM in every thread (call before starting any), so that
// WaitForStopSignal() can take them synchronously.
void BlockStopSignals();
// Waits for SIGINT or SIGTERM and returns it. With `exit_on_eof`, a thread
// turns EOF on stdin into SIGTERM: helper processes started by tests and
// benchmarks then die with their parent.
int WaitForStopSignal(bool exit_on_eof);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SIGNALS_H_
