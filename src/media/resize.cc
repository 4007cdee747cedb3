#include "media/resize.h"

#include <algorithm>
#include <cstddef>

namespace sluice::media {
namespace {

// Where target pixel i of n falls across `src` source pixels (centres
// aligned, clamped): the lower neighbour and the weight of the upper.
void Source(int i, int n, int src, int* lo, float* frac) {
  const float at = std::clamp(
      (static_cast<float>(i) + 0.5f) * static_cast<float>(src) / static_cast<float>(n) - 0.5f, 0.0f,
      static_cast<float>(src - 1));
  *lo = std::min(static_cast<int>(at), src - 1);
  *frac = at - static_cast<float>(*lo);
}

}  // namespace

RgbImage ResizeRgb(const RgbImage& in, int width, int height) {
  if (in.width == width && in.height == height) {
    return in;
  }
  RgbImage out;
  out.width = width;
  out.height = height;
  out.rgb.resize(static_cast<std::size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    int y0 = 0;
    float fy = 0;
    Source(y, height, in.height, &y0, &fy);
    const int y1 = std::min(y0 + 1, in.height - 1);
    for (int x = 0; x < width; ++x) {
      int x0 = 0;
      float fx = 0;
      Source(x, width, in.width, &x0, &fx);
      const int x1 = std::min(x0 + 1, in.width - 1);
      for (int c = 0; c < 3; ++c) {
        auto px = [&](int yy, int xx) {
          return static_cast<float>(in.rgb[(static_cast<std::size_t>(yy) * in.width + xx) * 3 + c]);
        };
        const float top = px(y0, x0) + fx * (px(y0, x1) - px(y0, x0));
        const float bottom = px(y1, x0) + fx * (px(y1, x1) - px(y1, x0));
        out.rgb[(static_cast<std::size_t>(y) * width + x) * 3 + c] =
            static_cast<std::uint8_t>(std::clamp(top + fy * (bottom - top) + 0.5f, 0.0f, 255.0f));
      }
    }
  }
  return out;
}

}  // namespace sluice::media
