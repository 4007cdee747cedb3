#include "orchestrator/service/video_mux.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/subprocess.h"
#include "media/frames_archive.h"

namespace sluice::orchestrator {

using media::FrameName;
using media::ReadTar;

std::string FindFfmpeg() {
  return FindOnPath("ffmpeg");
}

Result<std::string> FramesToMp4(std::string_view tar, int fps, const std::string& ffmpeg) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> frames, ReadTar(tar));
  if (frames.empty()) {
    return InvalidArgumentError("frames archive holds no frames");
  }
  char tmpl[] = "/tmp/sluice-mux-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    return InternalError("cannot create a temporary directory for ffmpeg");
  }
  const std::filesystem::path dir(tmpl);
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  for (std::size_t i = 0; i < frames.size(); ++i) {
    std::ofstream f(dir / FrameName(i), std::ios::binary);
    f.write(frames[i].data(), static_cast<std::streamsize>(frames[i].size()));
    if (!f) {
      return InternalError("cannot write frames for ffmpeg");
    }
  }
  const std::string in = (dir / "frame_%06d.png").string();
  const std::string out = (dir / "out.mp4").string();
  const std::string log = (dir / "ffmpeg.log").string();
  const std::string rate = std::to_string(std::max(1, std::min(fps, 240)));
  std::vector<std::string> args = {ffmpeg,
                                   "-hide_banner",
                                   "-loglevel",
                                   "error",
                                   "-y",
                                   "-framerate",
                                   rate,
                                   "-i",
                                   in,
                                   "-vf",
                                   "pad=ceil(iw/2)*2:ceil(ih/2)*2",
                                   "-c:v",
                                   "libx264",
                                   "-pix_fmt",
                                   "yuv420p",
                                   "-movflags",
                                   "+faststart",
                                   out};
  SLUICE_RETURN_IF_ERROR(RunTool(args, log));
  std::ifstream f(out, std::ios::binary);
  std::string mp4((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (mp4.empty()) {
    return InternalError("ffmpeg wrote no output");
  }
  return mp4;
}

}  // namespace sluice::orchestrator
