#include "orchestrator/core/model.h"

#include "gtest/gtest.h"

namespace sluice::orchestrator {
namespace {

TEST(ModelTest, PipelinesRoundTripAsText) {
  Result<std::vector<StageDecl>> p = ParsePipeline("encode,denoise:admission,decode");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, StandardPipeline());
  EXPECT_EQ(FormatPipeline(*p), "encode,denoise:admission,decode");
  p = ParsePipeline("denoise:work");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->at(0).kind, StageKind::kWork);
}

TEST(ModelTest, BadPipelinesAndNamesAreRefusedByName) {
  for (const char* bad :
       {"", ",", "encode,", "encode,,decode", "Encode", "de noise", "denoise:pinned", "-x"}) {
    Result<std::vector<StageDecl>> p = ParsePipeline(bad);
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_NE(ParsePipeline("denoise:pinned").status().message().find("work or admission"),
            std::string::npos);
  EXPECT_TRUE(ValidateModelName("Qwen/Qwen-Image:v1.2").ok());
  EXPECT_FALSE(ValidateModelName("a b").ok());
  EXPECT_FALSE(ValidateModelName(std::string(65, 'a')).ok());
  EXPECT_FALSE(ValidateModel({"m", {{"encode"}, {"encode"}}}).ok()) << "a stage twice";
  EXPECT_FALSE(ValidateModel({"m", std::vector<StageDecl>(17, StageDecl{"s"})}).ok());
}

}  // namespace
}  // namespace sluice::orchestrator
