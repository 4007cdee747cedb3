#include "orchestrator/service/video_mux.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "media/frames_archive.h"

extern char** environ;

namespace sluice::orchestrator {

using media::FrameName;
using media::ReadTar;

std::string FindFfmpeg() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/ffmpeg";
    if (::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
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
  std::vector<char*> argv;
  for (std::string& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, ffmpeg.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    return InternalError("cannot start " + ffmpeg + ": " + std::strerror(rc));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream l(log);
    std::string line, last;
    while (std::getline(l, line)) {
      last = line.empty() ? last : line;
    }
    return InternalError("ffmpeg failed: " + last);
  }
  std::ifstream f(out, std::ios::binary);
  std::string mp4((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (mp4.empty()) {
    return InternalError("ffmpeg wrote no output");
  }
  return mp4;
}

}  // namespace sluice::orchestrator
