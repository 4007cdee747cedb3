// The reference denoise's checkpoint keys are the standard ones
// (docs/design/cache-keys.md), naming every input that shapes the sampler state.
#include "sluice/runtime/reference_stages.h"

#include <gtest/gtest.h>

#include "sluice/cache/keys.h"

#include "runtime/reference/models.h"

namespace sluice {
namespace {

std::string Key(const std::string& request, int step) {
  Result<std::string> k = ReferenceCheckpointKey(request, step);
  EXPECT_TRUE(k.ok()) << k.status().ToString();
  return k.ok() ? *k : "";
}

TEST(ReferenceCheckpointKeyTest, IsTheStandardKeyOverEveryInput) {
  const std::string req =
      R"({"prompt":"a fox","negative_prompt":"blur","size":"64x64","seed":3,"steps":6,"guidance":4.5})";
  cache::CheckpointKeyParts p;
  p.model = "sluice-reference";
  p.model_version = reference::ReferenceModels().identity;
  p.sampler = "flow_euler_cfg";
  p.seed = 3;
  p.guidance = 4.5;
  p.condition_keys = *cache::ConditionKeysFor(ReferenceConditionEncoder(), req);
  p.total_steps = 6;
  p.step = 2;
  p.shape = {reference::kLatentChannels, 1, 16, 16};
  p.dtype = "f32";
  EXPECT_EQ(Key(req, 2), *cache::CheckpointKey(p));
  EXPECT_EQ(Key(req, 2).rfind("cache/ckpt/", 0), 0u);
  for (
      const char* other : {
          R"({"prompt":"a cat","negative_prompt":"blur","size":"64x64","seed":3,"steps":6,"guidance":4.5})",
          R"({"prompt":"a fox","negative_prompt":"","size":"64x64","seed":3,"steps":6,"guidance":4.5})",
          R"({"prompt":"a fox","negative_prompt":"blur","size":"64x80","seed":3,"steps":6,"guidance":4.5})",
          R"({"prompt":"a fox","negative_prompt":"blur","size":"64x64","seed":4,"steps":6,"guidance":4.5})",
          R"({"prompt":"a fox","negative_prompt":"blur","size":"64x64","seed":3,"steps":7,"guidance":4.5})",
          R"({"prompt":"a fox","negative_prompt":"blur","size":"64x64","seed":3,"steps":6,"guidance":5})",
      }) {
    EXPECT_NE(Key(other, 2), Key(req, 2)) << other;
  }
  EXPECT_NE(Key(req, 3), Key(req, 2));
  // Fields the sampler does not read leave the key alone.
  EXPECT_EQ(
      Key(R"({"prompt":"a fox","negative_prompt":"blur","size":"64x64","seed":3,"steps":6,"guidance":4.5,"user":"x"})",
          2),
      Key(req, 2));
  EXPECT_EQ(
      Key(R"({"prompt":"a fox","negative_prompt":"blur","size":"64x64","seed":3,"steps":6,"guidance":4.5,"preview_every":1})",
          2),
      Key(req, 2));
  EXPECT_EQ(ReferenceCheckpointKey(req, 6).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReferenceCheckpointKey(R"({"size":"64x64"})", 1).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
