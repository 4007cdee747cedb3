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
// Errors: kInvalidArgument (not a PNG, or corrupt).
Result<RgbImage> DecodePng(std::string_view png);

// `png` grown to `total_bytes` by a private ancillary chunk ("slPd", which
// decoders skip) before its IEND: a stand-in output with a real model's
// encoded size that still decodes. Unchanged when already that large.
// REQUIRES: `png` is a PNG ending in IEND (as EncodePng's are).
std::string PadPng(std::string png, std::size_t total_bytes);

}  // namespace sluice::media

#endif  // SLUICE_MEDIA_PNG_H_
