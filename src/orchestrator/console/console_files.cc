#include "orchestrator/console/console_files.h"

namespace sluice::orchestrator {
namespace {

using EmbeddedFile = ConsoleFile;
// kEmbeddedFiles: web/'s files, written at build time by
// cmake/embed_files.cmake.
#include "console_web_files.inc"

}  // namespace

const ConsoleFile* FindConsoleFile(std::string_view name) {
  for (const ConsoleFile& f : kEmbeddedFiles) {
    if (f.name == name) {
      return &f;
    }
  }
  return nullptr;
}

}  // namespace sluice::orchestrator
