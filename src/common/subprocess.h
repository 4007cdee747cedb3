// Running an outside tool (ffmpeg, gnuplot) to completion: found on PATH,
// started with posix_spawn, its stdin and stdout on /dev/null and its
// stderr in a log file whose last line becomes the error.
#ifndef SLUICE_COMMON_SUBPROCESS_H_
#define SLUICE_COMMON_SUBPROCESS_H_

#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice {

// The first executable `name` in a directory of PATH (/usr/bin:/bin when
// PATH is unset); "" when there is none.
std::string FindOnPath(const std::string& name);

// Runs args[0] (a path) with args[1..] and waits for it. Its stderr goes to
// `log_path` (created or truncated). Ok when it exits 0; otherwise
// kInternal naming the tool and the last non-empty line of its log.
// Blocks the calling thread for the tool's whole run.
Status RunTool(const std::vector<std::string>& args, const std::string& log_path);

}  // namespace sluice

#endif  // SLUICE_COMMON_SUBPROCESS_H_
