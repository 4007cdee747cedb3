// Video content: decode workers return a frames archive (a POSIX tar of PNG
// frames, in name order); the orchestrator turns it into an MP4 (H.264,
// yuv420p) with Debian's ffmpeg when it is installed, else serves the
// archive itself.
#ifndef SLUICE_ORCHESTRATOR_SERVICE_VIDEO_MUX_H_
#define SLUICE_ORCHESTRATOR_SERVICE_VIDEO_MUX_H_

#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::orchestrator {

// The full path of `ffmpeg` found on PATH, or empty.
std::string FindFfmpeg();
// Encodes the archive's frames at `fps` with the ffmpeg at `ffmpeg`.
// Errors: kInvalidArgument (bad archive, no frames), kInternal (ffmpeg
// failed; the message carries its last error line).
Result<std::string> FramesToMp4(std::string_view tar, int fps, const std::string& ffmpeg);

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_VIDEO_MUX_H_
