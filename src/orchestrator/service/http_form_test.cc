#include "orchestrator/service/http_form.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace sluice::orchestrator {
namespace {

using json = nlohmann::json;

http::FormPart Field(std::string name, std::string value) {
  return http::FormPart{std::move(name), "", "", std::move(value)};
}

Result<json> AsJson(std::vector<http::FormPart> parts, std::string* picture = nullptr) {
  std::string ignored;
  SLUICE_ASSIGN_OR_RETURN(std::string body, FormAsJson(std::move(parts), "image", "edit",
                                                       picture != nullptr ? picture : &ignored));
  return json::parse(body);
}

TEST(HttpFormTest, FieldsBecomeTheJsonBodysTypes) {
  std::string picture;
  Result<json> j =
      AsJson({Field("prompt", "a red square"), Field("steps", "12"), Field("strength", "0.6"),
              Field("async", "true"), http::FormPart{"image", "in.png", "image/png", "PNGBYTES"}},
             &picture);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(*j, json::parse(R"({"prompt":"a red square","steps":12,"strength":0.6,"async":true})"));
  EXPECT_EQ(picture, "PNGBYTES");
}

// What OpenAI's Node SDK writes for nested values, and JSON text as curl
// users write it, give the same body.
TEST(HttpFormTest, StepCacheAndAdaptersComeAsBracketsOrAsJson) {
  Result<json> brackets =
      AsJson({Field("prompt", "p"), Field("step_cache[threshold]", "0.25"),
              Field("lora[][name]", "mirror"), Field("lora[][scale]", "1"),
              Field("lora[][name]", "palette"), Field("lora[][scale]", "-0.5")});
  ASSERT_TRUE(brackets.ok()) << brackets.status().ToString();
  const json want = json::parse(
      R"({"prompt":"p","step_cache":{"threshold":0.25},
          "lora":[{"name":"mirror","scale":1.0},{"name":"palette","scale":-0.5}]})");
  EXPECT_EQ(*brackets, want);
  Result<json> text = AsJson({Field("prompt", "p"), Field("step_cache", R"({"threshold":0.25})"),
                              Field("lora", R"([{"name":"mirror","scale":1.0},
                                                {"name":"palette","scale":-0.5}])")});
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, want);
  // A name alone starts an adapter; its scale is left to the request's
  // default.
  Result<json> named = AsJson({Field("lora[][name]", "a"), Field("lora[][name]", "b")});
  ASSERT_TRUE(named.ok());
  EXPECT_EQ((*named)["lora"], json::parse(R"([{"name":"a"},{"name":"b"}])"));
}

TEST(HttpFormTest, BadFieldsAreRefusedByName) {
  const std::vector<std::pair<std::vector<http::FormPart>, std::string>> bad = {
      {{Field("mask", "x")}, "mask"},
      {{http::FormPart{"image", "a.png", "", "1"}, http::FormPart{"image[]", "b.png", "", "2"}},
       "image: one picture per edit"},
      {{http::FormPart{"prompt", "p.txt", "", "p"}}, "prompt: a file"},
      {{Field("prompt", "a"), Field("prompt", "b")}, "prompt: given twice"},
      {{Field("step_cache", "{not json")}, "step_cache: not a JSON object"},
      {{Field("step_cache", "[1]")}, "step_cache: not a JSON object"},
      {{Field("lora", R"({"name":"a"})")}, "lora: not a JSON array"},
      {{Field("step_cache[threshold]", "0.1"), Field("step_cache[threshold]", "0.2")},
       "step_cache[threshold]: given twice"},
      {{Field("step_cache", R"({"threshold":0.1})"), Field("step_cache[threshold]", "0.2")},
       "step_cache given twice (as JSON and in brackets)"},
      {{Field("lora", "[]"), Field("lora[][name]", "a")},
       "lora given twice (as JSON and in brackets)"},
      {{Field("lora[][name]", "a"), Field("lora", "[]")}, "lora: given twice"},
      {{Field("lora[][]", "a")}, "lora[][]: names no field"},
      {{Field("size[w]", "4")}, "size[w]: not a field this form takes"},
      {{http::FormPart{"image", "a.png", "", std::string(kMaxFormPictureBytes + 1, 'x')}},
       "at most 4 MiB"},
  };
  for (const auto& [parts, says] : bad) {
    Result<json> j = AsJson(parts);
    ASSERT_FALSE(j.ok()) << says;
    EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument) << says;
    EXPECT_NE(j.status().message().find(says), std::string_view::npos)
        << j.status().ToString() << " should say " << says;
  }
}

}  // namespace
}  // namespace sluice::orchestrator
