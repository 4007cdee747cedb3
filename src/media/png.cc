#include "media/png.h"

#include <png.h>

#include <cstring>

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
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, rgb, 0, nullptr)) {
    return InternalError(std::string("png: ") + image.message);
  }
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&image, out.data(), &size, 0, rgb, 0, nullptr)) {
    return InternalError(std::string("png: ") + image.message);
  }
  out.resize(size);
  return out;
}

Result<RgbImage> DecodePng(std::string_view png) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, png.data(), png.size())) {
    return InvalidArgumentError(std::string("png: ") + image.message);
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

}  // namespace sluice::media
