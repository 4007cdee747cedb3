// Arrival traces for the simulator: a CSV file of jobs and their arrival
// times, e.g. a production log's, replayed by `sluice sim --trace`.
#ifndef SLUICE_SIM_TRACE_H_
#define SLUICE_SIM_TRACE_H_

#include <string>
#include <vector>

#include "sluice/status.h"

#include "sim/simulator.h"

namespace sluice::sim {

// Reads `t_s,model,priority` lines (seconds from the trace's start, a
// model name, interactive|standard|batch; priority may be left empty for
// standard). A first line `t_s,model,priority` is a header; empty lines
// and lines starting with '#' are skipped. Times must not decrease.
// Errors: kNotFound (no such file), kInvalidArgument naming the file, the
// line and what is wrong with it.
Result<std::vector<TracedJob>> ReadTraceCsv(const std::string& path);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_TRACE_H_
