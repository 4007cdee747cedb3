#include "media/frames_archive.h"

#include <cstdio>
#include <cstring>

namespace sluice::media {
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

}  // namespace

std::string FrameName(std::size_t i) {
  char name[32];
  std::snprintf(name, sizeof(name), "frame_%06zu.png", i);
  return name;
}

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

}  // namespace sluice::media
