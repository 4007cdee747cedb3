// Standard cache keys: the golden vectors of docs/design/cache-keys.md (which
// python/tests/test_cache.py checks too), canonical order, types and the
// refusals.
#include "sluice/cache/keys.h"

#include <limits>

#include <gtest/gtest.h>

namespace sluice::cache {
namespace {

std::string Key(std::string_view kind, const std::vector<Field>& fields) {
  Result<std::string> k = MakeKey(kind, fields);
  EXPECT_TRUE(k.ok()) << k.status().ToString();
  return k.ok() ? *k : "";
}

TEST(CacheKeysTest, GoldenVectorsOfTheSpecification) {
  EXPECT_EQ(Key("cond", {}),
            "cache/cond/d446a0ab6a8be2f8c08a0605868473b8d6671dfd5d1c970416954202e3d0dc00");
  EXPECT_EQ(Key("demo", {{"text", std::string("a cat")},
                         {"n", std::int64_t{7}},
                         {"g", 4.5},
                         {"shape", std::vector<std::int64_t>{1, -2, 3}},
                         {"names", std::vector<std::string>{"x", ""}},
                         {"z", -0.0}}),
            "cache/demo/94c68010521ed71d9a7a4bb5afaab39e98d036361d14225dae69d1d5a2010e76");
  const std::vector<Field> params = {{"max_length", std::int64_t{64}},
                                     {"dtype", std::string("f32")}};
  EXPECT_EQ(*ConditionKey("sluice-reference-text", "1", "a red fox", params),
            "cache/cond/0cced3dffce1fdf5a404b3c35077b2c086a9522ca1e5915a8e7e94134ce08b23");
  EXPECT_EQ(*ConditionKey("sluice-reference-text", "2", "a red fox", params),
            "cache/cond/f54017fdd5e9b162cd447b939f0da860102b3cdec8b679488cd570e2cdf5cd86");
  EXPECT_EQ(*ConditionKey("sluice-reference-text", "1", "a red fox", params, "tenant-a"),
            "cache/cond/4e650743e42cd3084b910fade4088a0aea75f805cc697f39fbac94d2e183d52d");
  CheckpointKeyParts p;
  p.model = "sluice-reference";
  p.model_version = "1";
  p.sampler = "flow_euler";
  p.seed = 42;
  p.guidance = 4.0;
  p.condition_keys = {"cache/cond/aa", "cache/cond/bb"};
  p.total_steps = 12;
  p.step = 6;
  p.shape = {16, 1, 8, 8};
  p.dtype = "f32";
  EXPECT_EQ(*CheckpointKey(p),
            "cache/ckpt/8b77463871813c2b278fdfbb7390e2053f17a2e6fe5434e96f2d9f7548801179");
  const std::vector<Field> parts = {{"negative", std::string("cache/cond/bb")},
                                    {"timestep", std::int64_t{3}},
                                    {"layer", std::int64_t{0}}};
  EXPECT_EQ(*FeatureKey("sluice.dit", parts),
            "cache/feat/6c12ac3703377fa75ac55e8584e2648d972e20fe1aebf8c2f2f670b018771711");
}

TEST(CacheKeysTest, FieldOrderDoesNotMatterButTypesAndValuesDo) {
  const std::string a = Key("k", {{"a", std::int64_t{1}}, {"b", std::string("x")}});
  EXPECT_EQ(a, Key("k", {{"b", std::string("x")}, {"a", std::int64_t{1}}}));
  EXPECT_NE(a, Key("k", {{"a", std::string("1")}, {"b", std::string("x")}}));
  EXPECT_NE(a, Key("k", {{"a", 1.0}, {"b", std::string("x")}}));
  EXPECT_NE(a, Key("k", {{"a", std::int64_t{2}}, {"b", std::string("x")}}));
  EXPECT_NE(a, Key("j", {{"a", std::int64_t{1}}, {"b", std::string("x")}}));
  // Lengths are encoded: moving a byte between two texts changes the key.
  EXPECT_NE(Key("k", {{"a", std::string("ab")}, {"b", std::string("c")}}),
            Key("k", {{"a", std::string("a")}, {"b", std::string("bc")}}));
  EXPECT_NE(Key("k", {{"l", std::vector<std::string>{"ab", "c"}}}),
            Key("k", {{"l", std::vector<std::string>{"a", "bc"}}}));
  EXPECT_EQ(Key("k", {{"z", 0.0}}), Key("k", {{"z", -0.0}}));
  EXPECT_NE(Key("k", {{"l", std::vector<std::int64_t>{}}}),
            Key("k", {{"l", std::vector<std::string>{}}}));
}

TEST(CacheKeysTest, MalformedInputsAreRefusedByName) {
  auto refused = [](Result<std::string> r, std::string_view says) {
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << says;
    EXPECT_NE(r.status().message().find(says), std::string_view::npos) << r.status().ToString();
  };
  refused(MakeKey("", {}), "kind ''");
  refused(MakeKey("Cond", {}), "kind 'Cond'");
  refused(MakeKey(std::string(33, 'a'), {}), "1..32 bytes");
  std::vector<Field> dup = {{"a", std::int64_t{1}}, {"a", std::int64_t{2}}};
  refused(MakeKey("k", dup), "'a' appears twice");
  std::vector<Field> bad_name = {{"A b", std::int64_t{1}}};
  refused(MakeKey("k", bad_name), "field 'A b'");
  std::vector<Field> nan = {{"g", std::numeric_limits<double>::quiet_NaN()}};
  refused(MakeKey("k", nan), "'g': floats must be finite");
  std::vector<Field> reserved = {{"text", std::string("x")}};
  refused(ConditionKey("enc", "1", "t", reserved), "'text' is a reserved field name");
  refused(ConditionKey("", "1", "t"), "encoder id and version");
  refused(FeatureKey("Bad NS", {}), "feature namespace");
  CheckpointKeyParts p;
  p.model = p.model_version = p.sampler = p.dtype = "x";
  p.total_steps = 12;
  p.step = 12;
  refused(CheckpointKey(p), "step 12 must be in 1..11");
}

}  // namespace
}  // namespace sluice::cache
