#include "sim/overlap.h"

#include <gtest/gtest.h>

#include "sim/workloads.h"

namespace sluice::sim {
namespace {

// Chunked along T into k slices, decode starts on the first and waits for
// no slice when a slice crosses faster than it decodes: (k - 1)/k of the
// shorter of the transfer and the decode runs beside the other.
TEST(OverlapTest, ChunkingHidesAllButOneSliceOfTheShorterSide) {
  const ModelProfile wan = WanVideoProfile();  // A 4.2 MB latent, a 2.4 s decode.
  for (double gbps : {1.0, 0.001}) {
    Result<OverlapResult> o = MeasureOverlap(wan, gbps, 21);
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    const double shorter = std::min(o->transfer_s, o->decode_s);
    EXPECT_NEAR(o->hidden_s, shorter * 20 / 21, 1e-6 * o->sequential_s) << gbps;
    EXPECT_NEAR(o->pipelined_s, o->sequential_s - o->hidden_s, 1e-9);
  }
  // A slow link: most of the transfer hides under the decode.
  Result<OverlapResult> slow = MeasureOverlap(wan, 1.0, 21);
  ASSERT_TRUE(slow.ok());
  EXPECT_NEAR(slow->transfer_hidden, 20.0 / 21, 1e-3);
  EXPECT_LT(slow->decode_overlapped, 0.02);
  // Whole: nothing hides.
  Result<OverlapResult> whole = MeasureOverlap(wan, 1.0, 1);
  ASSERT_TRUE(whole.ok());
  EXPECT_NEAR(whole->hidden_s, 0, 1e-9);
  EXPECT_FALSE(MeasureOverlap(wan, 0, 21).ok());
  EXPECT_FALSE(MeasureOverlap(wan, 1, 0).ok());
}

// The sizes: Wan2.1 720p at 121 frames is a 31-frame latent
// (14.3 MB), decoded in 31/21 of the 81-frame time.
TEST(OverlapTest, AVideoProfileAtAnotherLengthScalesItsLatentAndDecode) {
  Result<::sluice::ModelProfile> wan = ::sluice::FindModelProfile("wan2.1-720p");
  ASSERT_TRUE(wan.ok());
  EXPECT_EQ(::sluice::VideoFrames(*wan), 81);
  Result<::sluice::ModelProfile> longer = ::sluice::AtFrames(*wan, 121);
  ASSERT_TRUE(longer.ok()) << longer.status().ToString();
  EXPECT_EQ(longer->name, "wan2.1-720p-121f");
  EXPECT_EQ(longer->latent_shape, (std::vector<std::int64_t>{16, 31, 90, 160}));
  EXPECT_DOUBLE_EQ(longer->decode_s, wan->decode_s * 31 / 21);
  EXPECT_EQ(longer->output_bytes, 121ull * 720 * 1280 * 3);
  Result<OverlapResult> o = MeasureOverlap(SimProfile(*longer), 10, 31);
  ASSERT_TRUE(o.ok());
  EXPECT_NEAR(o->latent_bytes, 2.0 * 16 * 31 * 90 * 160, 1);
  EXPECT_NEAR(o->transfer_hidden, 30.0 / 31, 1e-3);
  EXPECT_FALSE(::sluice::AtFrames(*wan, 80).ok());
  EXPECT_FALSE(::sluice::AtFrames(*::sluice::FindModelProfile("flux-1024"), 81).ok());
}

TEST(OverlapTest, AChunkedDecodeInAClusterFinishesEarlier) {
  Result<SimConfig> c = BuiltinWorkload("video", 12, 0.5, 0.5, 3);
  ASSERT_TRUE(c.ok());
  c->link_gbps = 0.01;  // A latent takes 3.4 s: longer than its decode.
  Result<SimResult> whole = Simulate(*c);
  c->models[0].stages[2].input_chunks = 21;
  Result<SimResult> chunked = Simulate(*c);
  ASSERT_TRUE(whole.ok() && chunked.ok());
  EXPECT_LT(chunked->classes[0].latency_s.p50, whole->classes[0].latency_s.p50 - 1.5);
}

}  // namespace
}  // namespace sluice::sim
