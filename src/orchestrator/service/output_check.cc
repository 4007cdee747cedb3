#include "orchestrator/service/output_check.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "media/frames_archive.h"
#include "media/png.h"

namespace sluice::orchestrator {
namespace {

constexpr std::string_view kPngSignature = "\x89PNG\r\n\x1a\n";

struct Want {
  int width = 0, height = 0;  // 0: not checked.
  std::int64_t frames = 0;
};

Want Parse(std::string_view request_json) {
  Want w;
  const nlohmann::json j = nlohmann::json::parse(request_json, nullptr, false);
  if (!j.is_object()) {
    return w;
  }
  if (auto s = j.find("size"); s != j.end() && s->is_string()) {
    const std::string size = *s;
    const std::size_t x = size.find('x');
    if (x != std::string::npos) {
      std::from_chars(size.data(), size.data() + x, w.width);
      std::from_chars(size.data() + x + 1, size.data() + size.size(), w.height);
    }
  }
  if (auto f = j.find("frames"); f != j.end() && f->is_number_integer()) {
    w.frames = *f;
  }
  return w;
}

std::uint32_t BigEndian32(std::string_view b, std::size_t at) {
  return (std::uint32_t{static_cast<std::uint8_t>(b[at])} << 24) |
         (std::uint32_t{static_cast<std::uint8_t>(b[at + 1])} << 16) |
         (std::uint32_t{static_cast<std::uint8_t>(b[at + 2])} << 8) |
         std::uint32_t{static_cast<std::uint8_t>(b[at + 3])};
}

std::string Size(std::int64_t w, std::int64_t h) {
  return std::to_string(w) + "x" + std::to_string(h);
}

// A PNG whose header says `want`'s size; decoded in full when `decode`.
Status CheckPng(std::string_view png, const Want& want, bool decode, const std::string& what) {
  // Signature, then IHDR: length, "IHDR", width, height.
  if (png.size() < 33 || png.substr(0, 8) != kPngSignature || png.substr(12, 4) != "IHDR") {
    return InvalidArgumentError(what + " is not a PNG");
  }
  // The header's size is checked before a decode, and bounds it: a forged
  // header cannot size the decode buffer.
  const std::int64_t w = BigEndian32(png, 16), h = BigEndian32(png, 20);
  if (want.width > 0 && (w != want.width || h != want.height)) {
    return InvalidArgumentError(what + " is " + Size(w, h) + ", the request asked for " +
                                Size(want.width, want.height));
  }
  if (decode) {
    const std::int64_t bound = want.width > 0 ? std::min(std::int64_t{want.width} * want.height,
                                                         media::kDefaultMaxDecodePixels)
                                              : media::kDefaultMaxDecodePixels;
    Result<media::RgbImage> img = media::DecodePng(png, bound);
    if (!img.ok()) {
      return InvalidArgumentError(what +
                                  " does not decode: " + std::string(img.status().message()));
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckOutput(std::string_view kind, std::string_view request_json, std::string_view type,
                   std::string_view bytes) {
  const Want want = Parse(request_json);
  if (kind == "image") {
    if (type != "image/png") {
      return InvalidArgumentError("an image job's result must be image/png, not '" +
                                  std::string(type) + "'");
    }
    return CheckPng(bytes, want, true, "the image");
  }
  if (type == "video/mp4") {
    if (bytes.size() < 12 || bytes.substr(4, 4) != "ftyp") {
      return InvalidArgumentError("the video/mp4 result does not start with an ftyp box");
    }
    return Status::Ok();
  }
  if (type != media::kFramesArchiveType) {
    return InvalidArgumentError("a video job's result must be video/mp4 or " +
                                std::string(media::kFramesArchiveType) + ", not '" +
                                std::string(type) + "'");
  }
  Result<std::vector<std::string>> frames = media::ReadTar(bytes);
  if (!frames.ok()) {
    return InvalidArgumentError("the frames archive does not parse: " +
                                std::string(frames.status().message()));
  }
  if (frames->empty() ||
      (want.frames > 0 && static_cast<std::int64_t>(frames->size()) != want.frames)) {
    return InvalidArgumentError("the frames archive holds " + std::to_string(frames->size()) +
                                " frames, the request asked for " + std::to_string(want.frames));
  }
  for (std::size_t i = 0; i < frames->size(); ++i) {
    const bool decode = i == 0 || i + 1 == frames->size();
    SLUICE_RETURN_IF_ERROR(CheckPng((*frames)[i], want, decode, "frame " + std::to_string(i)));
  }
  return Status::Ok();
}

}  // namespace sluice::orchestrator
