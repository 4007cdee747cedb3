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

TEST(ModelTest, RolesComeFromTheDeclaredKinds) {
  const PipelineRoles& standard = StandardRoles();
  EXPECT_EQ(standard.condition, "encode");
  EXPECT_EQ(standard.loop, "denoise");
  EXPECT_EQ(standard.output, "decode");
  const PipelineRoles r =
      RolesOf({{"text"}, {"prior"}, {"dit", StageKind::kAdmission}, {"vae"}, {"upscale"}});
  EXPECT_EQ(r.condition, "prior") << "the stage just before the loop";
  EXPECT_EQ(r.loop, "dit");
  EXPECT_EQ(r.output, "upscale") << "the last stage";
  const PipelineRoles alone = RolesOf({{"denoise", StageKind::kAdmission}});
  EXPECT_EQ(alone.loop, "denoise");
  EXPECT_TRUE(alone.condition.empty() && alone.output.empty());
  const PipelineRoles none = RolesOf({{"a"}, {"b"}});
  EXPECT_TRUE(none.condition.empty() && none.loop.empty() && none.output.empty());
}

TEST(ModelTest, ProgressFollowsTheDeclaredKindsNotTheNames) {
  const std::vector<StageDecl> standard = StandardPipeline();
  EXPECT_DOUBLE_EQ(PipelineProgress(standard, "encode", 0, 0), 0.0);
  EXPECT_DOUBLE_EQ(PipelineProgress(standard, "denoise", 0, 20), 0.1);
  EXPECT_DOUBLE_EQ(PipelineProgress(standard, "denoise", 10, 20), 0.5);
  EXPECT_DOUBLE_EQ(PipelineProgress(standard, "denoise", 20, 20), 0.9);
  EXPECT_DOUBLE_EQ(PipelineProgress(standard, "decode", 0, 0), 0.9);
  // Other names, same kinds: the same figures.
  const std::vector<StageDecl> renamed = {
      {"text", StageKind::kWork}, {"dit", StageKind::kAdmission}, {"vae", StageKind::kWork}};
  EXPECT_DOUBLE_EQ(PipelineProgress(renamed, "dit", 10, 20), 0.5);
  EXPECT_DOUBLE_EQ(PipelineProgress(renamed, "vae", 0, 0), 0.9);
  // Colocated (the loop alone) runs 0..1 by its steps; a step past the end,
  // no steps known, or a stage not in the pipeline stay in range.
  const std::vector<StageDecl> colocated = {{"denoise", StageKind::kAdmission}};
  EXPECT_DOUBLE_EQ(PipelineProgress(colocated, "denoise", 5, 20), 0.25);
  EXPECT_DOUBLE_EQ(PipelineProgress(colocated, "denoise", 30, 20), 1.0);
  EXPECT_DOUBLE_EQ(PipelineProgress(colocated, "denoise", 3, 0), 0.0);
  EXPECT_DOUBLE_EQ(PipelineProgress(standard, "upscale", 3, 4), 0.0);
  EXPECT_DOUBLE_EQ(PipelineProgress({}, "denoise", 3, 4), 0.0);
  // Work stages only: each counts once done.
  const std::vector<StageDecl> work = {{"a"}, {"b"}, {"c"}, {"d"}};
  EXPECT_DOUBLE_EQ(PipelineProgress(work, "c", 7, 9), 0.5);
}

}  // namespace
}  // namespace sluice::orchestrator
