#include <zlib.h>

#include <gtest/gtest.h>

#include "media/frames_archive.h"
#include "media/png.h"
#include "media/testing/png_forge.h"

namespace sluice::media {
namespace {

std::vector<std::uint8_t> Gradient(int w, int h) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) {
    rgb[i] = static_cast<std::uint8_t>(i * 7 + i / 97);
  }
  return rgb;
}

TEST(PngTest, RoundTripsEveryByte) {
  const auto rgb = Gradient(37, 23);
  auto png = EncodePng(rgb.data(), 37, 23);
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  EXPECT_EQ(png->substr(1, 3), "PNG");
  auto back = DecodePng(*png);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->width, 37);
  EXPECT_EQ(back->height, 23);
  EXPECT_EQ(back->rgb, rgb);
}

TEST(PngTest, RejectsBadSizesAndBytes) {
  const std::uint8_t px[3] = {};
  EXPECT_EQ(EncodePng(px, 0, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePng("not a png").status().code(), StatusCode::kInvalidArgument);
  const auto rgb = Gradient(8, 8);
  const std::string png = *EncodePng(rgb.data(), 8, 8);
  EXPECT_FALSE(DecodePng(png.substr(0, png.size() / 2)).ok());
}

TEST(PngTest, AHeaderCannotSizeTheDecodeBufferBeyondTheBound) {
  const auto rgb = Gradient(8, 8);
  const std::string png = *EncodePng(rgb.data(), 8, 8);
  // 65535² RGB pixels would be a 12 GiB buffer.
  const std::string forged = testing::WithHeaderSize(png, 65535, 65535);
  Result<RgbImage> big = DecodePng(forged);
  ASSERT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("65535x65535"), std::string_view::npos)
      << big.status().ToString();
  EXPECT_TRUE(DecodePng(png, 64).ok()) << "exactly the bound decodes";
  Result<RgbImage> over = DecodePng(png, 63);
  ASSERT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("more than the 63 pixels"), std::string_view::npos);
}

TEST(FramesArchiveTest, RoundTripsAndRejectsTruncation) {
  const std::vector<std::string> files = {"a", std::string(513, 'b'), ""};
  const std::string tar = WriteFramesTar(files);
  EXPECT_EQ(tar.size() % 512, 0u);
  EXPECT_EQ(tar.substr(0, 16), std::string("frame_000000.png"));
  auto back = ReadTar(tar);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, files);
  EXPECT_EQ(ReadTar(tar.substr(0, 700)).status().code(), StatusCode::kInvalidArgument);
}

TEST(PngTest, APaddedPngHasTheAskedSizeAndStillDecodes) {
  std::vector<std::uint8_t> rgb(16 * 8 * 3, 99);
  const std::string png = *EncodePng(rgb.data(), 16, 8);
  const std::string padded = PadPng(png, 50000);
  EXPECT_EQ(padded.size(), 50000u);
  Result<RgbImage> back = DecodePng(padded);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->width, 16);
  EXPECT_EQ(back->rgb, rgb);
  // The original's chunks, then the pad chunk (length, "slPd", zeros, its
  // CRC over type and data), then the original's IEND.
  const std::size_t at = png.size() - 12;
  const std::size_t data = 50000 - png.size() - 12;
  EXPECT_EQ(padded.substr(0, at), png.substr(0, at));
  auto be32 = [&](std::size_t off) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      v = v << 8 | static_cast<std::uint8_t>(padded[off + i]);
    }
    return v;
  };
  EXPECT_EQ(be32(at), data);
  EXPECT_EQ(padded.substr(at + 4, 4), "slPd");
  EXPECT_EQ(padded.find_first_not_of('\0', at + 8), at + 8 + data);
  const auto crc = ::crc32(::crc32(0, nullptr, 0), reinterpret_cast<const Bytef*>(&padded[at + 4]),
                           static_cast<uInt>(4 + data));
  EXPECT_EQ(be32(at + 8 + data), crc);
  EXPECT_EQ(padded.substr(at + 12 + data), png.substr(at));
  EXPECT_EQ(PadPng(png, png.size() + 3), png) << "too little room for a chunk: unchanged";
}

}  // namespace
}  // namespace sluice::media
