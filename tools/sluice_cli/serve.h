// `sluice serve` (the embedded deployment, optionally running a demo) and
// `sluice generate` (the HTTP client).
#ifndef SLUICE_TOOLS_SERVE_H_
#define SLUICE_TOOLS_SERVE_H_

#include <string>

#include "sluice/serve/embedded.h"

#include "tools/sluice_cli/http_client.h"

namespace sluice::cli {

struct ServeOptions {
  EmbeddedConfig cluster;
  bool demo = false;  // Submit demo jobs, write results, print figures, exit.
  std::string out_dir = "out";
  bool exit_on_eof = false;
};
// Returns the process exit code (demo: 0 when every job succeeded).
int RunServe(const ServeOptions& o);

struct GenerateOptions {
  std::string server = "127.0.0.1:8000";
  GenerateRequest request;
  std::string output;  // File to write.
  int timeout_s = 600;
};
int RunGenerate(const GenerateOptions& o);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SERVE_H_
