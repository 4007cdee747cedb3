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

extern char** environ;

namespace sluice::orchestrator {
namespace {

constexpr std::size_t kBlock = 512;
constexpr std::size_t kMaxFiles = 4096;

std::uint64_t Octal(std::string_view field) {
  std::uint64_t v = 0;
  for (char c : field) {
    if (c < '0' || c > '7') {
      break;
    }
    v = v * 8 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

std::string FrameName(std::size_t i) {
  char name[32];
  std::snprintf(name, sizeof(name), "frame_%06zu.png", i);
  return name;
}

}  // namespace

Result<std::vector<std::string>> ReadTar(std::string_view tar) {
  std::vector<std::string> files;
  std::size_t at = 0;
  while (at + kBlock <= tar.size()) {
    std::string_view h = tar.substr(at, kBlock);
    if (h.find_first_not_of('\0') == std::string_view::npos) {
      return files;  // End-of-archive block.
    }
    const std::uint64_t size = Octal(h.substr(124, 12));
    const char type = h[156];
    at += kBlock;
    if (size > tar.size() - at) {
      return InvalidArgumentError("frames archive truncated");
    }
    if (type == '0' || type == '\0') {
      if (files.size() >= kMaxFiles) {
        return InvalidArgumentError("frames archive holds more than 4096 files");
      }
      files.emplace_back(tar.substr(at, size));
    }
    at += (size + kBlock - 1) / kBlock * kBlock;
  }
  if (at != tar.size()) {
    return InvalidArgumentError("frames archive truncated");
  }
  return files;
}

std::string WriteFramesTar(const std::vector<std::string>& files) {
  std::string out;
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::string h(kBlock, '\0');
    const std::string name = FrameName(i);
    std::memcpy(h.data(), name.data(), name.size());
    std::snprintf(h.data() + 100, 8, "%07o", 0644);
    std::snprintf(h.data() + 108, 8, "%07o", 0);
    std::snprintf(h.data() + 116, 8, "%07o", 0);
    std::snprintf(h.data() + 124, 12, "%011llo", static_cast<unsigned long long>(files[i].size()));
    std::snprintf(h.data() + 136, 12, "%011o", 0);
    h[156] = '0';
    std::memcpy(h.data() + 257, "ustar", 5);
    std::memcpy(h.data() + 263, "00", 2);
    std::memset(h.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) {
      sum += c;
    }
    std::snprintf(h.data() + 148, 8, "%06o", sum);
    h[155] = ' ';
    out += h;
    out += files[i];
    out.append((kBlock - files[i].size() % kBlock) % kBlock, '\0');
  }
  out.append(2 * kBlock, '\0');
  return out;
}

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
