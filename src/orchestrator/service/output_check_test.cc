#include "orchestrator/service/output_check.h"

#include <vector>

#include <gtest/gtest.h>

#include "media/frames_archive.h"
#include "media/png.h"
#include "media/testing/png_forge.h"

namespace sluice::orchestrator {
namespace {

std::string Png(int w, int h) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3, 40);
  return *media::EncodePng(rgb.data(), w, h);
}

std::string Why(const Status& s) {
  return std::string(s.message());
}

TEST(OutputCheckTest, AnImageMustBeAPngOfTheRequestedSize) {
  const std::string req = R"({"prompt":"p","size":"64x48"})";
  EXPECT_TRUE(CheckOutput("image", req, "image/png", Png(64, 48)).ok());
  EXPECT_TRUE(CheckOutput("image", req, "image/png", media::PadPng(Png(64, 48), 100000)).ok())
      << "a padded PNG still decodes";
  EXPECT_NE(Why(CheckOutput("image", req, "text/plain", Png(64, 48))).find("must be image/png"),
            std::string::npos);
  EXPECT_NE(Why(CheckOutput("image", req, "image/png", Png(48, 64))).find("is 48x64"),
            std::string::npos);
  EXPECT_NE(
      Why(CheckOutput("image", req, "image/png", "\x89PNG\r\n\x1a\nforged")).find("not a PNG"),
      std::string::npos);
  std::string corrupt = Png(64, 48);
  corrupt.resize(corrupt.size() - 20);  // IDAT cut short: the header is fine.
  EXPECT_NE(Why(CheckOutput("image", req, "image/png", corrupt)).find("does not decode"),
            std::string::npos);
  EXPECT_TRUE(CheckOutput("image", R"({"prompt":"no size"})", "image/png", Png(8, 8)).ok())
      << "a request without a size checks the type and the decode only";
}

// A forged header claiming 65535x65535 (a 12 GiB decode buffer) is refused
// by its size before any decode, with or without a requested size.
TEST(OutputCheckTest, AForgedHeaderCannotSizeTheDecodeBuffer) {
  const std::string forged = media::testing::WithHeaderSize(Png(64, 48), 65535, 65535);
  const std::string why =
      Why(CheckOutput("image", R"({"prompt":"p","size":"64x48"})", "image/png", forged));
  EXPECT_NE(why.find("is 65535x65535, the request asked for 64x48"), std::string::npos) << why;
  const std::string unsized =
      Why(CheckOutput("image", R"({"prompt":"no size"})", "image/png", forged));
  EXPECT_NE(unsized.find("does not decode: png: the image is 65535x65535, more than"),
            std::string::npos)
      << unsized;
}

TEST(OutputCheckTest, AVideoIsAFramesArchiveOfTheRequestedFramesOrAnMp4) {
  const std::string req = R"({"size":"32x16","frames":3})";
  const std::string three = media::WriteFramesTar({Png(32, 16), Png(32, 16), Png(32, 16)});
  EXPECT_TRUE(CheckOutput("video", req, media::kFramesArchiveType, three).ok());
  EXPECT_NE(Why(CheckOutput("video", req, media::kFramesArchiveType,
                            media::WriteFramesTar({Png(32, 16), Png(32, 16)})))
                .find("holds 2 frames, the request asked for 3"),
            std::string::npos);
  EXPECT_NE(Why(CheckOutput("video", req, media::kFramesArchiveType,
                            media::WriteFramesTar({Png(32, 16), Png(16, 16), Png(32, 16)})))
                .find("frame 1 is 16x16"),
            std::string::npos);
  EXPECT_NE(
      Why(CheckOutput("video", req, media::kFramesArchiveType, "not a tar")).find("does not parse"),
      std::string::npos);
  EXPECT_TRUE(CheckOutput("video", req, "video/mp4",
                          std::string("\0\0\0\x18"
                                      "ftypisom",
                                      12))
                  .ok());
  EXPECT_FALSE(CheckOutput("video", req, "video/mp4", "garbage garbage").ok());
  EXPECT_NE(Why(CheckOutput("video", req, "image/png", Png(32, 16))).find("must be video/mp4"),
            std::string::npos);
}

}  // namespace
}  // namespace sluice::orchestrator
