#include "sluice/units.h"

#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(ByteSizeTest, ParsesBinaryUnits) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("16MiB"), 16u << 20);
  EXPECT_EQ(*ParseByteSize("1m"), 1u << 20);
  EXPECT_EQ(*ParseByteSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("64KB"), 64u << 10);
}

TEST(ByteSizeTest, RejectsBadTextWithTheReason) {
  EXPECT_EQ(ParseByteSize("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseByteSize("MiB").status().code(), StatusCode::kInvalidArgument);
  Status unit = ParseByteSize("3parsecs").status();
  EXPECT_EQ(unit.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unit.message().find("unknown unit"), std::string_view::npos);
  EXPECT_EQ(ParseByteSize("99999999999TiB").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseByteSize("-1").status().code(), StatusCode::kInvalidArgument);
}

TEST(ByteSizeTest, FormatsWithTheLargestWholeUnit) {
  EXPECT_EQ(FormatByteSize(16u << 20), "16MiB");
  EXPECT_EQ(FormatByteSize(512), "512B");
  EXPECT_EQ(FormatByteSize(3u << 29), "1.5GiB");
}

}  // namespace
}  // namespace sluice
