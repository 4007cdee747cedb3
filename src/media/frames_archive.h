// Frames archives: how a decode stage returns a video — a POSIX ustar
// archive of PNG frames named frame_000000.png, ... in frame order. The
// orchestrator serves it as MP4 (service/video_mux.h) or as is.
#ifndef SLUICE_MEDIA_FRAMES_ARCHIVE_H_
#define SLUICE_MEDIA_FRAMES_ARCHIVE_H_

#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::media {

inline constexpr std::string_view kFramesArchiveType = "application/x-sluice-frames+tar";

// The regular files of a ustar archive, in archive order.
// Errors: kInvalidArgument (truncated or malformed, over 4096 files).
Result<std::vector<std::string>> ReadTar(std::string_view tar);
// The name of frame i in an archive: frame_000000.png, ...
std::string FrameName(std::size_t i);
// A ustar archive of `files` named frame_000000.png, ... (copies them).
std::string WriteFramesTar(const std::vector<std::string>& files);

}  // namespace sluice::media

#endif  // SLUICE_MEDIA_FRAMES_ARCHIVE_H_
