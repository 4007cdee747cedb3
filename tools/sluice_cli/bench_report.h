// How every `sluice bench` workload reports: its result as one JSON line,
// or its error naming the benchmark.
#ifndef SLUICE_TOOLS_BENCH_REPORT_H_
#define SLUICE_TOOLS_BENCH_REPORT_H_

#include <iostream>

#include "sluice/status.h"

namespace sluice::cli {

// Prints ToJson(*r) (found beside R's type), or r's error; returns the
// exit code: 0, 2 for invalid options, 1 otherwise.
template <typename R>
int Report(const char* name, const Result<R>& r) {
  if (!r.ok()) {
    std::cerr << "sluice bench " << name << ": " << r.status().ToString() << "\n";
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::cout << ToJson(*r) << std::endl;
  return 0;
}

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_BENCH_REPORT_H_
