// Runs a shell command (popen) and returns what it printed on stdout, for
// tests that drive `sluice bench ... --json` and read its one JSON object.
#ifndef SLUICE_TESTS_INTEGRATION_COMMAND_OUTPUT_H_
#define SLUICE_TESTS_INTEGRATION_COMMAND_OUTPUT_H_

#include <cstdio>
#include <string>

namespace sluice::testing {

// Its stdout; `*status` is pclose's (-1 when it could not start).
inline std::string CommandOutput(const std::string& cmd, int* status) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *status = -1;
    return "";
  }
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) {
    out.append(buf, n);
  }
  *status = ::pclose(p);
  return out;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_INTEGRATION_COMMAND_OUTPUT_H_
