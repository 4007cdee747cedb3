// The web console's files (web/: a page, its script and its style), built
// into the binary at compile time: the orchestrator serves them at
// /console with no file system, CDN or network at run time.
#ifndef SLUICE_ORCHESTRATOR_CONSOLE_CONSOLE_FILES_H_
#define SLUICE_ORCHESTRATOR_CONSOLE_CONSOLE_FILES_H_

#include <string_view>

namespace sluice::orchestrator {

struct ConsoleFile {
  std::string_view name;  // Its path under web/, e.g. "console.js".
  std::string_view type;  // Its Content-Type.
  std::string_view body;  // Its bytes, static for the life of the process.
};

// The console's file named `name` (a path under web/: "index.html",
// "console.js", ...); nullptr for any other name. The pointer and the
// views it holds are valid for the life of the process.
const ConsoleFile* FindConsoleFile(std::string_view name);

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_CONSOLE_CONSOLE_FILES_H_
