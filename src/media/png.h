// PNG encoding and decoding of 8-bit RGB images (Debian's libpng, the
// simplified API: no setjmp, errors as Status).
#ifndef SLUICE_MEDIA_PNG_H_
#define SLUICE_MEDIA_PNG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::media {

struct RgbImage {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // Rows top to bottom, 3 bytes per pixel.
};

// Encodes rgb [height][width][3] (rows `width`·3 bytes apart) as PNG.
// Errors: kInvalidArgument (empty or oversized image), kInternal (libpng).
Result<std::string> EncodePng(const std::uint8_t* rgb, int width, int height);
// The most pixels DecodePng allocates for unless told otherwise: 8192²
// (192 MiB of RGB).
inline constexpr std::int64_t kDefaultMaxDecodePixels = std::int64_t{8192} * 8192;

// Decodes `png` to 8-bit RGB. Its header's width·height is checked against
// `max_pixels` before any pixel buffer is allocated, so a 33-byte header
// cannot size a gigabyte buffer. REQUIRES: max_pixels > 0.
// Errors: kInvalidArgument (not a PNG, corrupt, or larger than
// `max_pixels`, naming its size).
Result<RgbImage> DecodePng(std::string_view png, std::int64_t max_pixels = kDefaultMaxDecodePixels);

// `png` grown to `total_bytes` by a private ancillary chunk ("slPd", which
// decoders skip) before its IEND: a stand-in output with a real model's
// encoded size that still decodes. Unchanged when already that large.
// REQUIRES: `png` is a PNG ending in IEND (as EncodePng's are).
std::string PadPng(std::string png, std::size_t total_bytes);

}  // namespace sluice::media

#endif  // SLUICE_MEDIA_PNG_H_
