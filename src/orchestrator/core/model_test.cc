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

// A model declares what each stage weighs ("@N"): a video model whose
// decode is half its time puts the end of its loop at 0.5, not 0.9.
TEST(ModelTest, DeclaredProgressWeightsReplaceTheKindsDefaults) {
  Result<std::vector<StageDecl>> p = ParsePipeline("encode@1,denoise:admission@4,decode@4");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->at(1).kind, StageKind::kAdmission);
  EXPECT_EQ(p->at(1).progress_weight, 4);
  EXPECT_EQ(FormatPipeline(*p), "encode@1,denoise:admission@4,decode@4");
  EXPECT_TRUE(ValidateModel({"video", *p}).ok());
  EXPECT_DOUBLE_EQ(PipelineProgress(*p, "denoise", 0, 10), 1.0 / 9);
  EXPECT_DOUBLE_EQ(PipelineProgress(*p, "denoise", 10, 10), 5.0 / 9);
  EXPECT_DOUBLE_EQ(PipelineProgress(*p, "decode", 0, 0), 5.0 / 9);
  // One stage declared, the others by kind.
  p = ParsePipeline("encode@10,denoise:admission,decode");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(FormatPipeline(*p), "encode@10,denoise:admission,decode");
  EXPECT_DOUBLE_EQ(PipelineProgress(*p, "denoise", 0, 4), 10.0 / 19);
  EXPECT_NE(*p, StandardPipeline()) << "weights are part of the pipeline a worker must match";
  EXPECT_EQ(ProgressWeight({"x", StageKind::kAdmission}), kAdmissionWeight);
  EXPECT_EQ(ProgressWeight({"x", StageKind::kWork, 3}), 3);
}

TEST(ModelTest, BadProgressWeightsAreRefusedByName) {
  for (const char* bad :
       {"denoise@", "denoise@0", "denoise@1001", "denoise@-1", "denoise@2x", "denoise@ 2",
        "denoise@1@2", "denoise:admission@", "@3", "denoise@99999999999999999999"}) {
    Result<std::vector<StageDecl>> p = ParsePipeline(bad);
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_NE(ParsePipeline("decode@0").status().message().find("'decode@0'"), std::string::npos);
  EXPECT_NE(ParsePipeline("decode@0").status().message().find("1..1000"), std::string::npos);
  const Status s = ValidateModel({"m", {{"encode", StageKind::kWork, 1001}}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("progress weight 1001"), std::string::npos) << s.ToString();
  EXPECT_FALSE(ValidateModel({"m", {{"encode", StageKind::kWork, -1}}}).ok());
}

}  // namespace
}  // namespace sluice::orchestrator
