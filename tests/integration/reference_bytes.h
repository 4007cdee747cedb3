// For multi-process tests: what the reference pipeline computes for a
// request body in one process (the bytes a cluster must serve for it).
#ifndef SLUICE_TESTS_INTEGRATION_REFERENCE_BYTES_H_
#define SLUICE_TESTS_INTEGRATION_REFERENCE_BYTES_H_

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "media/frames_archive.h"
#include "media/png.h"
#include "runtime/reference/pipeline.h"

namespace sluice::testing {

// The PNG or video bytes for `body` with the workers' defaults (12 steps,
// guidance 4), or a text saying why there are none.
inline std::string ReferenceBytes(const nlohmann::json& body) {
  auto r = reference::ParseRequest(body.dump(), 12, 4.0f);
  if (!r.ok()) {
    return "unparsable: " + r.status().ToString();
  }
  auto out = reference::GenerateAll(*r);
  return out.ok() ? out->first : "failed: " + out.status().ToString();
}

// PSNR in dB of two pictures' bytes (1e9 when equal). REQUIRES equal sizes.
inline double Psnr(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  double se = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    se += d * d;
  }
  return se == 0 ? 1e9 : 10 * std::log10(255.0 * 255.0 / (se / static_cast<double>(a.size())));
}

// Whether `got` (a PNG or a frames archive) is the reference pipeline's
// picture for `body` within PSNR 40 dB, frame by frame: what a job whose
// steps ran in a batch gives (within float32 rounding of it alone).
inline bool CloseToReference(const std::string& got, const nlohmann::json& body) {
  const std::string want = ReferenceBytes(body);
  auto frames = [](const std::string& bytes) {
    std::vector<std::string> pngs;
    if (bytes.rfind("\x89PNG", 0) == 0) {
      pngs.push_back(bytes);
    } else if (auto tar = media::ReadTar(bytes); tar.ok()) {
      pngs = std::move(*tar);
    }
    return pngs;
  };
  const std::vector<std::string> a = frames(got), b = frames(want);
  if (a.empty() || a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto pa = media::DecodePng(a[i]);
    auto pb = media::DecodePng(b[i]);
    if (!pa.ok() || !pb.ok() || pa->rgb.size() != pb->rgb.size()) {
      return false;
    }
    if (Psnr(pa->rgb, pb->rgb) < 40.0) {
      return false;
    }
  }
  return true;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_INTEGRATION_REFERENCE_BYTES_H_
