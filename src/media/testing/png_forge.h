// Test helper: a PNG whose header lies about its size, as a forger would
// send one to make a decoder size a huge buffer.
#ifndef SLUICE_MEDIA_TESTING_PNG_FORGE_H_
#define SLUICE_MEDIA_TESTING_PNG_FORGE_H_

#include <zlib.h>

#include <cstdint>
#include <string>

namespace sluice::media::testing {

// `png` (a valid PNG) with its IHDR claiming `width` x `height` and the
// chunk's CRC made right again, so only the size check can refuse it.
inline std::string WithHeaderSize(std::string png, std::uint32_t width, std::uint32_t height) {
  auto put32 = [&](std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) {
      png[at + i] = static_cast<char>(v >> (24 - 8 * i));
    }
  };
  put32(16, width);
  put32(20, height);
  // IHDR's CRC covers its type and 13 data bytes (offsets 12..28).
  put32(29, static_cast<std::uint32_t>(::crc32(
                ::crc32(0, nullptr, 0), reinterpret_cast<const Bytef*>(png.data() + 12), 17)));
  return png;
}

}  // namespace sluice::media::testing

#endif  // SLUICE_MEDIA_TESTING_PNG_FORGE_H_
