// Encoder declarations, the condition keys of a request and cached inputs.
#include "sluice/cache/condition.h"

#include <gtest/gtest.h>

namespace sluice::cache {
namespace {

ConditionEncoder Encoder() {
  return {"enc",
          "1",
          {{"max_length", std::int64_t{64}}, {"dtype", std::string("f32")}},
          {"prompt", "negative_prompt"}};
}

TEST(ConditionTest, KeysOfARequestAreItsTextsConditionKeysInOrder) {
  const ConditionEncoder e = Encoder();
  Result<std::vector<std::string>> keys =
      ConditionKeysFor(e, R"({"prompt":"a fox","negative_prompt":"blurry","seed":3})");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0], *ConditionKey("enc", "1", "a fox", e.params));
  EXPECT_EQ((*keys)[1], *ConditionKey("enc", "1", "blurry", e.params));
  // An absent field is the empty text; other fields do not matter.
  Result<std::vector<std::string>> bare = ConditionKeysFor(e, R"({"prompt":"a fox"})");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ((*bare)[0], (*keys)[0]);
  EXPECT_EQ((*bare)[1], *ConditionKey("enc", "1", "", e.params));
  // Another version: other keys.
  ConditionEncoder v2 = e;
  v2.version = "2";
  EXPECT_NE((*ConditionKeysFor(v2, R"({"prompt":"a fox"})"))[0], (*keys)[0]);

  EXPECT_EQ(ConditionKeysFor(e, "[1]").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ConditionKeysFor(e, "{").status().code(), StatusCode::kInvalidArgument);
  Result<std::vector<std::string>> bad = ConditionKeysFor(e, R"({"prompt":3})");
  EXPECT_NE(bad.status().message().find("'prompt' is not a string"), std::string_view::npos);
}

// A tenant's scope gives keys no other tenant's request computes, and a
// scope cannot be forged through an encoder parameter.
TEST(ConditionTest, AScopedRequestHasItsOwnKeys) {
  const ConditionEncoder e = Encoder();
  const auto shared = *ConditionKeysFor(e, R"({"prompt":"a fox"})");
  const auto a = *ConditionKeysFor(e, R"({"prompt":"a fox","cache_scope":"tenant-a"})");
  const auto b = *ConditionKeysFor(e, R"({"prompt":"a fox","cache_scope":"tenant-b"})");
  EXPECT_EQ(a[0], *ConditionKey("enc", "1", "a fox", e.params, "tenant-a"));
  EXPECT_NE(a[0], shared[0]);
  EXPECT_NE(a[0], b[0]);
  EXPECT_NE(a[1], b[1]) << "the empty negative prompt is scoped too";
  EXPECT_EQ(*ConditionKeysFor(e, R"({"prompt":"a fox","cache_scope":""})"), shared)
      << "an empty scope is the shared one";
  Result<std::vector<std::string>> bad =
      ConditionKeysFor(e, R"({"prompt":"a fox","cache_scope":7})");
  EXPECT_NE(bad.status().message().find("'cache_scope' is not a string"), std::string_view::npos);
  EXPECT_EQ(
      ConditionKey("enc", "1", "a fox", {{{"scope", std::string("tenant-a")}}}).status().code(),
      StatusCode::kInvalidArgument);
}

TEST(ConditionTest, ParamsRoundTripThroughJsonWithTheirTypes) {
  const std::vector<Field> params = {{"a", std::string("x")},
                                     {"b", std::int64_t{-3}},
                                     {"c", 4.0},
                                     {"d", std::vector<std::int64_t>{1, 2}},
                                     {"e", std::vector<std::string>{"p", "q"}}};
  Result<std::vector<Field>> back = ParamsFromJson(ParamsToJson(params));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*ConditionKey("enc", "1", "t", *back), *ConditionKey("enc", "1", "t", params));
  EXPECT_EQ(ParamsFromJson(R"({"a":true})").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParamsFromJson(R"({"a":[]})").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParamsFromJson(R"({"a":[1,"x"]})").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParamsFromJson("3").status().code(), StatusCode::kInvalidArgument);
}

TEST(ConditionTest, DeclarationsAreChecked) {
  ConditionEncoder e = Encoder();
  EXPECT_TRUE(Validate(e).ok());
  e.text_fields.clear();
  EXPECT_EQ(Validate(e).code(), StatusCode::kInvalidArgument);
  e = Encoder();
  e.version.clear();
  EXPECT_EQ(Validate(e).code(), StatusCode::kInvalidArgument);
  e = Encoder();
  e.params.push_back({"text", std::string("reserved")});
  EXPECT_EQ(Validate(e).code(), StatusCode::kInvalidArgument);
}

TEST(ConditionTest, CachedInputsRoundTripAndAreToldFromDescriptors) {
  const std::vector<std::string> keys = {"cache/cond/aa", "cache/cond/bb"};
  const std::string input = EncodeCachedInput(keys);
  EXPECT_TRUE(IsCachedInput(input));
  EXPECT_EQ(*DecodeCachedInput(input), keys);
  EXPECT_FALSE(IsCachedInput(std::string("\x01\x02binary descriptor", 19)));
  EXPECT_FALSE(IsCachedInput(""));
  EXPECT_EQ(DecodeCachedInput("sluice-cached-input-v1\n").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeCachedInput("sluice-cached-input-v1\na\n\nb\n").status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::cache
