// Runs a shell command (popen) and returns what it printed on stdout, for
// tests that drive `sluice bench ... --json` and read its one JSON object.
#ifndef SLUICE_TESTS_INTEGRATION_COMMAND_OUTPUT_H_
#define SLUICE_TESTS_INTEGRATION_COMMAND_OUTPUT_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
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

// Like CommandOutput, with the command's stderr kept: `*errors` gets the
// last `keep` bytes of it (a crash's message, a failed run's log), which a
// test prints when the run failed.
inline std::string CommandOutputAndErrors(const std::string& cmd, int* status, std::string* errors,
                                          std::size_t keep = 4000) {
  char path[] = "/tmp/sluice-command-stderr-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) {
    *status = -1;
    return "";
  }
  ::close(fd);
  const std::string out = CommandOutput("(" + cmd + ") 2>" + path, status);
  std::ifstream in(path);
  std::ostringstream all;
  all << in.rdbuf();
  ::unlink(path);
  const std::string e = all.str();
  *errors = e.size() > keep ? e.substr(e.size() - keep) : e;
  return out;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_INTEGRATION_COMMAND_OUTPUT_H_
