// Bilinear scaling of 8-bit RGB pictures (pixel centres aligned, edges
// clamped): what an image edit's picture goes through on its way to the
// requested size.
#ifndef SLUICE_MEDIA_RESIZE_H_
#define SLUICE_MEDIA_RESIZE_H_

#include "media/png.h"

namespace sluice::media {

// `in` scaled to width × height (a copy when the size is the same).
// REQUIRES: in is non-empty, width and height > 0.
RgbImage ResizeRgb(const RgbImage& in, int width, int height);

}  // namespace sluice::media

#endif  // SLUICE_MEDIA_RESIZE_H_
