#include "http/multipart.h"

#include <random>

#include <gtest/gtest.h>

namespace sluice::http {
namespace {

const char* kType = "multipart/form-data; boundary=\"----b;1\"";

TEST(MultipartTest, FieldsAndFilesAsSdksSendThem) {
  const std::string body =
      "preamble\r\n------b;1\r\n"
      "Content-Disposition: form-data; name=\"prompt\"\r\n\r\n"
      "a fox\r\nin snow\r\n"
      "------b;1\r\n"
      "Content-Disposition: form-data; name=\"input_reference\"; filename=\"ref \\\"1\\\".png\"\r\n"
      "Content-Type: image/png\r\n\r\n" +
      std::string("\x89PNG\r\n\0\r\n--", 12) + "\r\n------b;1--\r\n";
  EXPECT_TRUE(IsMultipartForm(kType));
  EXPECT_FALSE(IsMultipartForm("application/json"));
  auto parts = ParseMultipartForm(kType, body);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "prompt");
  EXPECT_EQ((*parts)[0].data, "a fox\r\nin snow");
  EXPECT_FALSE((*parts)[0].is_file());
  EXPECT_EQ((*parts)[1].name, "input_reference");
  EXPECT_EQ((*parts)[1].filename, "ref \"1\".png");
  EXPECT_EQ((*parts)[1].content_type, "image/png");
  EXPECT_EQ((*parts)[1].data, std::string("\x89PNG\r\n\0\r\n--", 12));
}

TEST(MultipartTest, MalformedBodiesAreRefusedNamingWhy) {
  auto why = [](std::string_view type, std::string_view body) {
    auto r = ParseMultipartForm(type, body, 2);
    EXPECT_FALSE(r.ok());
    return std::string(r.status().message());
  };
  EXPECT_NE(why("multipart/form-data", "x").find("no boundary"), std::string::npos);
  EXPECT_NE(why(kType, "no delimiter").find("opens"), std::string::npos);
  EXPECT_NE(why(kType, "------b;1\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nno end")
                .find("ends inside part 'a'"),
            std::string::npos);
  EXPECT_NE(why(kType, "------b;1\r\nX: y\r\n\r\nv\r\n------b;1--").find("name"),
            std::string::npos);
  const std::string part = "------b;1\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nv\r\n";
  EXPECT_NE(why(kType, part + part + part + "------b;1--").find("more than 2"), std::string::npos);
}

// Bounded random mutations (fixed seed) of a valid body: every result is a
// list of parts or kInvalidArgument, never a read outside the body (the
// sanitizer build checks).
TEST(MultipartTest, MangledBodiesParseOrAreRefused) {
  const std::string valid =
      "------b;1\r\nContent-Disposition: form-data; name=\"a\"; filename=\"x\\\"y\"\r\n"
      "Content-Type: text/plain\r\n\r\nvalue\r\n------b;1\r\n"
      "Content-Disposition: form-data; name=b\r\n\r\n\r\n------b;1--";
  ASSERT_TRUE(ParseMultipartForm(kType, valid).ok());
  std::mt19937 rng(7);
  for (int i = 0; i < 5000; ++i) {
    std::string body = valid;
    for (int e = static_cast<int>(rng() % 4); e >= 0 && !body.empty(); --e) {
      const std::size_t at = rng() % body.size();
      if (rng() % 2 == 0) {
        body[at] = "\r\n-\";=;x"[rng() % 9];
      } else {
        body.erase(at, rng() % 8);
      }
    }
    auto r = ParseMultipartForm(kType, body);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
  // Content types cut short: multipart exactly when the media type is
  // whole, and the body parses to the same parts as with the whole type or
  // is refused -- never to other parts.
  auto whole = ParseMultipartForm(kType, valid);
  ASSERT_TRUE(whole.ok());
  const std::string full = kType;
  int parsed = 0;
  for (std::size_t n = 0; n <= full.size(); ++n) {
    const std::string type = full.substr(0, n);
    EXPECT_EQ(IsMultipartForm(type), n == 19 || n >= 20) << type;
    auto r = ParseMultipartForm(type, valid);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << type;
      continue;
    }
    ++parsed;
    ASSERT_EQ(r->size(), whole->size()) << type;
    for (std::size_t k = 0; k < r->size(); ++k) {
      EXPECT_EQ((*r)[k].name, (*whole)[k].name) << type;
      EXPECT_EQ((*r)[k].data, (*whole)[k].data) << type;
    }
  }
  EXPECT_GE(parsed, 1);  // The whole type, at least.
}

}  // namespace
}  // namespace sluice::http
