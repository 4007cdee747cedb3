#include "media/png.h"

#include <png.h>
#include <zlib.h>

#include <cstring>
#include <memory>

namespace sluice::media {

Result<std::string> EncodePng(const std::uint8_t* rgb, int width, int height) {
  if (width <= 0 || height <= 0 || width > 16384 || height > 16384) {
    return InvalidArgumentError("png: image size " + std::to_string(width) + "x" +
                                std::to_string(height) + " is outside 1..16384");
  }
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_RGB;
  // One pass into an uninitialized buffer of libpng's bound (only the pages
  // the encoder writes are touched), then one copy of what it wrote: not a
  // sizing pass and a second encode.
  png_alloc_size_t size = PNG_IMAGE_PNG_SIZE_MAX(image);
  std::unique_ptr<char[]> buf(new char[size]);
  if (!png_image_write_to_memory(&image, buf.get(), &size, 0, rgb, 0, nullptr)) {
    return InternalError(std::string("png: ") + image.message);
  }
  return std::string(buf.get(), size);
}

Result<RgbImage> DecodePng(std::string_view png, std::int64_t max_pixels) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, png.data(), png.size())) {
    return InvalidArgumentError(std::string("png: ") + image.message);
  }
  // Only the header has been read: bound the buffer before allocating it.
  const std::int64_t pixels = std::int64_t{image.width} * std::int64_t{image.height};
  if (pixels > max_pixels) {
    png_image_free(&image);
    return InvalidArgumentError("png: the image is " + std::to_string(image.width) + "x" +
                                std::to_string(image.height) + ", more than the " +
                                std::to_string(max_pixels) + " pixels allowed");
  }
  image.format = PNG_FORMAT_RGB;
  RgbImage out;
  out.width = static_cast<int>(image.width);
  out.height = static_cast<int>(image.height);
  out.rgb.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.rgb.data(), 0, nullptr)) {
    png_image_free(&image);
    return InvalidArgumentError(std::string("png: ") + image.message);
  }
  return out;
}

std::string PadPng(std::string png, std::size_t total_bytes) {
  constexpr std::size_t kIend = 12;      // Length, "IEND", CRC.
  constexpr std::size_t kOverhead = 12;  // The pad chunk's length, type and CRC.
  if (png.size() < kIend || total_bytes < png.size() + kOverhead) {
    return png;
  }
  const std::size_t data = total_bytes - png.size() - kOverhead;
  // Built in one allocation of the final size: the padded output is
  // megabytes, and each extra copy of it is fresh memory to fault in.
  std::string out;
  out.reserve(total_bytes);
  out.append(png, 0, png.size() - kIend);
  auto put32 = [&](std::uint32_t v) {
    for (int i = 0; i < 4; ++i) {
      out.push_back(static_cast<char>(v >> (24 - 8 * i)));
    }
  };
  put32(static_cast<std::uint32_t>(data));
  const std::size_t type_at = out.size();
  out.append("slPd");
  out.append(data, '\0');
  const auto crc =
      ::crc32(::crc32(0, nullptr, 0), reinterpret_cast<const Bytef*>(out.data() + type_at),
              static_cast<uInt>(4 + data));
  put32(static_cast<std::uint32_t>(crc));
  out.append(png, png.size() - kIend, kIend);
  return out;
}

}  // namespace sluice::media
