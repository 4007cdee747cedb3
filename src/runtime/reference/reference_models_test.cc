#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "media/frames_archive.h"
#include "media/png.h"
#include "runtime/reference/adapter.h"
#include "runtime/reference/pipeline.h"

namespace sluice::reference {
namespace {

Request Parse(const std::string& json) {
  auto r = ParseRequest(json, 3, 4.0f);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : Request{};
}

TEST(ReferenceRequestTest, ParsesFieldsAndNamesBadOnes) {
  const Request r = Parse(R"({"prompt":"a fox","size":"72x40","seed":7,"steps":5})");
  EXPECT_EQ(r.width, 72);
  EXPECT_EQ(r.height, 40);
  EXPECT_EQ(r.steps, 5);
  EXPECT_FALSE(r.video);
  EXPECT_EQ(r.latent().h, 12);  // 40 px → 48 px of latent cells (multiple of 16).
  EXPECT_EQ(r.latent().w, 20);
  const Request v = Parse(R"({"prompt":"waves","size":"64x48","frames":9})");
  EXPECT_TRUE(v.video);
  EXPECT_EQ(v.latent().t, 3);
  for (const char* bad :
       {R"({"size":"64x64"})", R"({"prompt":"x","size":"64by64"})",
        R"({"prompt":"x","size":"64x64px"})", R"({"prompt":"x","steps":0})",
        R"({"prompt":"x","guidance":"high"})", R"({"prompt":"x","frames":0})", "[1,2]"}) {
    EXPECT_EQ(ParseRequest(bad, 3, 4.0f).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(r.step_cache.has_value());
  EXPECT_EQ(Parse(R"({"prompt":"x","step_cache":{"threshold":0.25}})").step_cache, 0.25f);
  EXPECT_EQ(Parse(R"({"prompt":"x","step_cache":{"threshold":0}})").step_cache, 0.0f);
  for (const char* bad : {R"({"prompt":"x","step_cache":0.2})", R"({"prompt":"x","step_cache":{}})",
                          R"({"prompt":"x","step_cache":{"threshold":1.5}})",
                          R"({"prompt":"x","step_cache":{"threshold":-0.1}})",
                          R"({"prompt":"x","step_cache":{"threshold":"0.2"}})",
                          R"({"prompt":"x","step_cache":{"threshold":0.2,"warmup":1}})"}) {
    const Status s = ParseRequest(bad, 3, 4.0f).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s.message().rfind("step_cache: ", 0), 0u) << s.message();
  }
  auto big = ParseRequest(R"({"prompt":"x","size":"2048x2048"})", 3, 4.0f);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("size: the reference model takes at most 4096"),
            std::string::npos)
      << big.status().message();
}

TEST(ReferenceModelsTest, SameRequestSameBytesOnAnyThread) {
  const Request r = Parse(R"({"prompt":"a lighthouse at dusk","size":"64x48","seed":3})");
  auto first = GenerateAll(r);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->second, "image/png");
  auto png = media::DecodePng(first->first);
  ASSERT_TRUE(png.ok());
  EXPECT_EQ(png->width, 64);
  EXPECT_EQ(png->height, 48);
  std::string others[3];
  std::vector<std::thread> threads;
  for (auto& out : others) {
    threads.emplace_back([&out, &r] { out = GenerateAll(r)->first; });
  }
  for (auto& t : threads) {
    t.join();
  }
  for (const auto& out : others) {
    EXPECT_EQ(out, first->first);
  }
}

TEST(ReferenceModelsTest, PromptSeedAndGuidanceChangeTheImage) {
  const std::string base = R"({"prompt":"a red boat","size":"32x32","seed":1)";
  const std::string a = GenerateAll(Parse(base + "}"))->first;
  EXPECT_NE(a, GenerateAll(Parse(R"({"prompt":"a blue boat","size":"32x32","seed":1})"))->first);
  EXPECT_NE(a, GenerateAll(Parse(R"({"prompt":"a red boat","size":"32x32","seed":2})"))->first);
  EXPECT_NE(a, GenerateAll(Parse(base + R"(,"guidance":0})"))->first);
  // Not a flat image: the decoder draws structure.
  auto px = media::DecodePng(a);
  ASSERT_TRUE(px.ok());
  std::set<std::uint8_t> values(px->rgb.begin(), px->rgb.end());
  EXPECT_GT(values.size(), 16u);
}

TEST(ReferenceModelsTest, VideoHasTheRequestedFramesAndResumedSamplingMatches) {
  const Request r = Parse(R"({"prompt":"rain","size":"48x32","frames":6,"seed":9})");
  auto whole = GenerateAll(r);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->second, media::kFramesArchiveType);
  auto frames = media::ReadTar(whole->first);
  ASSERT_TRUE(frames.ok());
  ASSERT_EQ(frames->size(), 6u);
  EXPECT_EQ(media::DecodePng(frames->back())->width, 48);
  EXPECT_NE((*frames)[0], (*frames)[1]);

  // A sampler stopped after step 1 and resumed from a copy of its state
  // ends where an uninterrupted one does (what checkpoints rely on).
  const std::vector<float> cond = EncodeCondition(r);
  std::vector<float> x = InitialNoise(r);
  DenoiseStep(r, cond.data(), 0, x);
  std::vector<float> resumed = x;
  for (int i = 1; i < r.steps; ++i) {
    DenoiseStep(r, cond.data(), i, resumed);
  }
  FrameDecoder dec(r);
  for (int k = 0; k < r.latent().t; ++k) {
    ASSERT_TRUE(dec.AddLatentFrame(resumed.data(), k).ok());
  }
  EXPECT_EQ(dec.frames_done(), 6u);
  EXPECT_EQ(dec.Output(), whole->first);
}

TEST(ReferenceModelsTest, SharedNegativeCrossKvIsBitIdentical) {
  const Request r =
      Parse(R"({"prompt":"a fox","negative_prompt":"blur","size":"64x48","steps":3})");
  const std::vector<float> cond = EncodeCondition(r);
  const std::vector<float> kv =
      ReferenceModels().denoiser.CrossKv(cond.data() + kTextLen * kTextDim);
  ASSERT_EQ(kv.size(), Denoiser::kCrossKvFloats);
  std::vector<float> a = InitialNoise(r), b = a;
  for (int i = 0; i < r.steps; ++i) {
    DenoiseStep(r, cond.data(), i, a);
    DenoiseStep(r, cond.data(), i, b, kv.data());
  }
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  // Another negative prompt's keys change the result: they are used.
  const Request other = Parse(R"({"prompt":"a fox","negative_prompt":"sharp","size":"64x48"})");
  const std::vector<float> kv2 =
      ReferenceModels().denoiser.CrossKv(EncodeCondition(other).data() + kTextLen * kTextDim);
  std::vector<float> c = InitialNoise(r);
  DenoiseStep(r, cond.data(), 0, c, kv2.data());
  std::vector<float> d = InitialNoise(r);
  DenoiseStep(r, cond.data(), 0, d);
  EXPECT_NE(std::memcmp(c.data(), d.data(), c.size() * sizeof(float)), 0);
}

// The step cache: off (threshold 0) or asking for no change at all gives
// the uncached bytes; on, it skips the blocks on some steps (never the
// first) and lands near the uncached result, not on it.
TEST(ReferenceModelsTest, StepCacheSkipsStepsAndStaysNearTheUncachedResult) {
  const Request r =
      Parse(R"({"prompt":"a large red circle on the left on a blue background","size":"128x128",)"
            R"("steps":12,"seed":3})");
  const std::vector<float> cond = EncodeCondition(r);
  auto run = [&](float threshold, StepCache* out) {
    std::vector<float> x = InitialNoise(r);
    StepCache cache;
    cache.threshold = threshold;
    for (int i = 0; i < r.steps; ++i) {
      DenoiseStep(r, cond.data(), i, x, nullptr, nullptr, threshold < 0 ? nullptr : &cache);
    }
    if (out != nullptr) {
      *out = cache;
    }
    return x;
  };
  const std::vector<float> plain = run(-1, nullptr);
  StepCache off, tiny, on;
  for (auto [threshold, cache] :
       {std::pair<float, StepCache*>{0, &off}, {1e-6f, &tiny}, {0.3f, &on}}) {
    const std::vector<float> x = run(threshold, cache);
    const bool same = std::memcmp(x.data(), plain.data(), x.size() * sizeof(float)) == 0;
    EXPECT_EQ(same, threshold < 0.1f) << "threshold " << threshold;
    if (threshold > 0.1f) {
      double diff = 0, base = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        diff += std::fabs(x[i] - plain[i]);
        base += std::fabs(plain[i]);
      }
      EXPECT_LT(diff / base, 0.25) << "the cached latent strays from the uncached one";
    }
  }
  EXPECT_EQ(off.skipped, 0);
  EXPECT_TRUE(off.anchor.empty()) << "off keeps nothing";
  EXPECT_EQ(tiny.skipped, 0);
  EXPECT_EQ(tiny.computed, r.steps);
  EXPECT_GT(on.skipped, 0);
  EXPECT_GE(on.computed, 1);
  EXPECT_EQ(on.computed + on.skipped, r.steps);
}

// The step cache's state survives a checkpoint: restored at any step k,
// the run goes on bit-identically to one never interrupted; started empty
// at k instead, it does not (for some k). Malformed states are refused.
TEST(ReferenceModelsTest, AStepCacheRestoredAtAStepGoesOnAsIfNeverInterrupted) {
  const Request r = Parse(R"({"prompt":"a small green square at the top","size":"128x128",)"
                          R"("steps":12,"seed":4})");
  const std::vector<float> cond = EncodeCondition(r);
  auto run = [&](int from, std::vector<float> x, StepCache c) {
    for (int i = from; i < r.steps; ++i) {
      DenoiseStep(r, cond.data(), i, x, nullptr, nullptr, &c);
    }
    return x;
  };
  StepCache fresh;
  fresh.threshold = 0.3f;
  const std::vector<float> whole = run(0, InitialNoise(r), fresh);
  int cold_differs = 0;
  for (int k = 1; k < r.steps; ++k) {
    std::vector<float> x = InitialNoise(r);
    StepCache c = fresh;
    for (int i = 0; i < k; ++i) {
      DenoiseStep(r, cond.data(), i, x, nullptr, nullptr, &c);
    }
    StepCache restored = fresh;
    ASSERT_TRUE(RestoreStepCache(SerializeStepCache(c), r.latent().tokens(), &restored).ok());
    EXPECT_EQ(restored.computed + restored.skipped, k);
    const std::vector<float> warm = run(k, x, restored);
    EXPECT_EQ(std::memcmp(warm.data(), whole.data(), whole.size() * sizeof(float)), 0)
        << "resumed at step " << k;
    const std::vector<float> cold = run(k, x, fresh);
    cold_differs += std::memcmp(cold.data(), whole.data(), whole.size() * sizeof(float)) != 0;
  }
  EXPECT_GT(cold_differs, 0) << "no step shows what the kept state is for";

  StepCache c = fresh;
  std::vector<float> x = InitialNoise(r);
  DenoiseStep(r, cond.data(), 0, x, nullptr, nullptr, &c);
  const std::string state = SerializeStepCache(c);
  StepCache target = fresh;
  EXPECT_FALSE(
      RestoreStepCache(state.substr(0, state.size() - 4), r.latent().tokens(), &target).ok());
  EXPECT_FALSE(RestoreStepCache(state, r.latent().tokens() / 2, &target).ok());
  EXPECT_FALSE(RestoreStepCache("SSC0" + state.substr(4), r.latent().tokens(), &target).ok());
  EXPECT_FALSE(RestoreStepCache("", r.latent().tokens(), &target).ok());
  EXPECT_TRUE(target.anchor.empty()) << "a refused state leaves the cache as it was";
  // Before any step: a header only.
  EXPECT_TRUE(RestoreStepCache(SerializeStepCache(fresh), r.latent().tokens(), &target).ok());
}

// Jobs sampled together, each at its own step (one joining late, one with
// the step cache on): unbatched, each is DenoiseStep's bit for bit;
// batched, each lands within float32 rounding of it (BLAS sums in another
// order for larger products): the same picture, give or take one level in
// a few pixels.
TEST(ReferenceModelsTest, ABatchOfJobsSamplesEachAsItWouldAlone) {
  const char* prompts[] = {"a large red circle on the left on a blue background",
                           "a small green square at the top", "a yellow triangle on the right",
                           "a large blue diamond in the centre on a white background"};
  struct Job {
    Request r;
    std::vector<float> cond, x, alone;
    StepCache cache;
    int start = 0;  // The step this job joins the batch at.
  };
  std::vector<Job> jobs(4);
  for (int k = 0; k < 4; ++k) {
    Job& j = jobs[k];
    j.r = Parse(std::string(R"({"prompt":")") + prompts[k] + R"(","size":"128x128","steps":12,)" +
                R"("seed":)" + std::to_string(k) + R"(,"guidance":)" + std::to_string(3 + k) + "}");
    j.cond = EncodeCondition(j.r);
    j.cache.threshold = k == 3 ? 0.3f : 0.0f;
    j.start = k == 2 ? 5 : 0;  // Joins after the others' step 5.
    StepCache c = j.cache;
    j.alone = InitialNoise(j.r);
    for (int i = 0; i < j.r.steps; ++i) {
      DenoiseStep(j.r, j.cond.data(), i, j.alone, nullptr, nullptr, &c);
    }
  }
  for (const bool batched : {false, true}) {
    SCOPED_TRACE(batched ? "batched" : "unbatched");
    std::vector<int> step(4, 0);
    std::vector<StepCache> caches;
    for (Job& j : jobs) {
      j.x = InitialNoise(j.r);
      caches.push_back(j.cache);
    }
    for (int round = 0; round < 17; ++round) {
      std::vector<SampleStep> batch;
      for (int k = 0; k < 4; ++k) {
        Job& j = jobs[k];
        if (round >= j.start && step[k] < j.r.steps) {
          batch.push_back({&j.r, j.cond.data(), step[k]++, &j.x, nullptr, nullptr, &caches[k], {}});
        }
      }
      DenoiseSteps(batch, batched);
    }
    for (int k = 0; k < 4; ++k) {
      const Job& j = jobs[k];
      ASSERT_EQ(step[k], j.r.steps);
      const bool same = std::memcmp(j.x.data(), j.alone.data(), j.x.size() * sizeof(float)) == 0;
      if (!batched) {
        EXPECT_TRUE(same) << "job " << k;
        continue;
      }
      float worst = 0;
      for (std::size_t i = 0; i < j.x.size(); ++i) {
        worst = std::max(worst, std::fabs(j.x[i] - j.alone[i]));
      }
      EXPECT_LT(worst, 1e-3f) << "job " << k;
      FrameDecoder a(j.r), b(j.r);
      ASSERT_TRUE(a.AddLatentFrame(j.x.data(), 0).ok());
      ASSERT_TRUE(b.AddLatentFrame(j.alone.data(), 0).ok());
      auto pa = media::DecodePng(a.Output()), pb = media::DecodePng(b.Output());
      ASSERT_TRUE(pa.ok() && pb.ok());
      int off = 0, far = 0;
      for (std::size_t i = 0; i < pa->rgb.size(); ++i) {
        const int diff = std::abs(pa->rgb[i] - pb->rgb[i]);
        off += diff > 0;
        far += diff > 1;
      }
      std::printf(
          "job %d batched: latent max |diff| %.2e, %d of %zu channel values off by 1, %d "
          "by more\n",
          k, worst, off, pa->rgb.size(), far);
      EXPECT_EQ(far, 0) << "job " << k;
      EXPECT_LT(off, static_cast<int>(pa->rgb.size() / 100)) << "job " << k;
    }
  }
}

// Cache and checkpoint keys carry the weights' identity: other weights,
// another identity; the same weights, the same one.
TEST(ReferenceModelsTest, IdentityNamesTheWeights) {
  auto a = LoadModels("random:1");
  auto b = LoadModels("random:2");
  auto a2 = LoadModels("random:1");
  ASSERT_TRUE(a.ok() && b.ok() && a2.ok());
  EXPECT_EQ((*a)->identity.rfind("2/", 0), 0u) << (*a)->identity;
  EXPECT_EQ((*a)->identity.size(), 18u);
  EXPECT_EQ((*a)->identity, (*a2)->identity);
  EXPECT_NE((*a)->identity, (*b)->identity);
  EXPECT_NE((*a)->identity, ReferenceModels().identity);
}

double Psnr(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  double se = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    se += d * d;
  }
  return se == 0 ? 1e9 : 10 * std::log10(255.0 * 255.0 / (se / static_cast<double>(a.size())));
}

// tests/golden/`name`, decoded. Errors: kNotFound (no such file), the
// decoder's.
Result<media::RgbImage> GoldenPng(const std::string& name) {
  const std::string path = std::string(SLUICE_SOURCE_DIR) + "/tests/golden/" + name;
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) {
    return NotFoundError(path + ": cannot open");
  }
  std::stringstream bytes;
  bytes << f.rdbuf();
  return media::DecodePng(bytes.str());
}

// The PyTorch mirror's picture for this request, from the shipped weights
// (python/sluice_model/golden.py): the same weights give the same numbers
// in both runtimes, within float rounding.
TEST(ReferenceModelsTest, MatchesThePyTorchMirrorsGoldenImage) {
  auto want = GoldenPng("reference_torch_128.png");
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  const Request r =
      Parse(R"({"prompt":"a large red circle on the left on a blue background","size":"128x128",)"
            R"("seed":1,"steps":12,"guidance":4})");
  auto got = GenerateAll(r);
  ASSERT_TRUE(got.ok());
  auto px = media::DecodePng(got->first);
  ASSERT_TRUE(px.ok());
  ASSERT_EQ(px->rgb.size(), want->rgb.size());
  EXPECT_GE(Psnr(px->rgb, want->rgb), 40.0);
  // And the picture is not the background alone: the circle is drawn
  // (pixels near the left-centre anchor are red, the corners blue).
  auto at = [&](int x, int y, int c) {
    return px->rgb[(static_cast<std::size_t>(y) * 128 + x) * 3 + c];
  };
  EXPECT_GT(at(28, 64, 0), 150);
  EXPECT_LT(at(28, 64, 2), 100);
  EXPECT_LT(at(4, 4, 0), 100);
  EXPECT_GT(at(4, 4, 2), 150);
}

// Image edits against the mirror (python/sluice_model/golden.py): the
// golden picture through the VAE's encoder and decoder, and edited to
// another colour at strength 0.6 — the same pictures within PSNR 40 dB.
// The edit keeps the picture's layout (the circle stays on the left) and
// takes the new prompt's colour.
TEST(ReferenceModelsTest, EditsMatchThePyTorchMirrorsRoundTripAndEdit) {
  auto source = GoldenPng("reference_torch_128.png");
  auto roundtrip = GoldenPng("reference_torch_roundtrip_128.png");
  auto edited = GoldenPng("reference_torch_edit_128.png");
  ASSERT_TRUE(source.ok() && roundtrip.ok() && edited.ok());
  const Request r = Parse(R"({"prompt":"a large green circle on the left on a blue background",)"
                          R"("size":"128x128","seed":2,"steps":12,"guidance":4})");
  const std::vector<float> z0 = EncodePicture(r, source->rgb.data(), 128, 128);
  auto decoded = [&](const std::vector<float>& z) {
    FrameDecoder dec(r);
    EXPECT_TRUE(dec.AddLatentFrame(z.data(), 0).ok());
    auto png = media::DecodePng(dec.Output());
    EXPECT_TRUE(png.ok());
    return png.ok() ? png->rgb : std::vector<std::uint8_t>();
  };
  EXPECT_GE(Psnr(decoded(z0), roundtrip->rgb), 40.0);
  const int start = EditStartStep(r.steps, 0.6f);
  EXPECT_EQ(start, 5);  // 12 - floor(7.2).
  std::vector<float> x = EditStartLatent(r, z0, start);
  const std::vector<float> cond = EncodeCondition(r);
  for (int i = start; i < r.steps; ++i) {
    DenoiseStep(r, cond.data(), i, x);
  }
  const std::vector<std::uint8_t> got = decoded(x);
  EXPECT_GE(Psnr(got, edited->rgb), 40.0);
  auto at = [&](int px, int py, int c) {
    return got[(static_cast<std::size_t>(py) * 128 + px) * 3 + c];
  };
  EXPECT_GT(at(28, 64, 1), 120) << "green where the red circle was";
  EXPECT_LT(at(28, 64, 0), 100);
  EXPECT_GT(at(4, 4, 2), 150) << "the blue background kept";
  // Strength bounds: 1 starts from the seed's noise alone, tiny keeps all
  // but the last step.
  EXPECT_EQ(EditStartStep(12, 1.0f), 0);
  EXPECT_EQ(EditStartStep(12, 0.01f), 11);
  const std::vector<float> from_noise = EditStartLatent(r, z0, 0);
  EXPECT_EQ(from_noise, InitialNoise(r));
}

std::shared_ptr<const Adapter> MirrorAdapter() {
  auto a = Adapter::Open(std::string(SLUICE_SOURCE_DIR) + "/models/adapters/mirror.safetensors");
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? *a : nullptr;
}

// The shipped mirror adapter (python/sluice_model/train_adapter.py) against
// the PyTorch mirror's picture with it (golden.py): the circle asked for
// on the left is drawn on the right. At scale 0 the adapter changes no bit.
TEST(ReferenceModelsTest, AnAdapterMatchesThePyTorchMirrorsPicture) {
  auto want = GoldenPng("reference_torch_mirror_128.png");
  auto base = GoldenPng("reference_torch_128.png");
  ASSERT_TRUE(want.ok() && base.ok()) << want.status().ToString();
  const std::shared_ptr<const Adapter> mirror = MirrorAdapter();
  ASSERT_NE(mirror, nullptr);
  EXPECT_EQ(mirror->rank(), 8);
  EXPECT_EQ(mirror->name(), "mirror");
  EXPECT_EQ(mirror->digest().size(), 16u);
  const Request r =
      Parse(R"({"prompt":"a large red circle on the left on a blue background","size":"128x128",)"
            R"("seed":1,"steps":12,"guidance":4})");
  const LoraTerm on[] = {{mirror.get(), 1.0f}}, off[] = {{mirror.get(), 0.0f}};
  auto got = GenerateAll(r, on);
  ASSERT_TRUE(got.ok());
  auto px = media::DecodePng(got->first);
  ASSERT_TRUE(px.ok());
  EXPECT_GE(Psnr(px->rgb, want->rgb), 40.0);
  EXPECT_LT(Psnr(px->rgb, base->rgb), 20.0) << "the adapter changed the picture";
  auto at = [&](int x, int y, int c) {
    return px->rgb[(static_cast<std::size_t>(y) * 128 + x) * 3 + c];
  };
  EXPECT_GT(at(128 - 28, 64, 0), 150) << "red on the right";
  EXPECT_LT(at(28, 64, 0), 100) << "not on the left";
  EXPECT_EQ(GenerateAll(r, off)->first, GenerateAll(r)->first);
}

// A batch may mix adapters: each sample's low-rank updates run on its own
// rows, so jobs with the adapter, without it and at half its scale, some
// through the step cache, batched, each land within float32 rounding of
// their pictures alone (adapters, step caching and batching compose).
TEST(ReferenceModelsTest, ABatchMixingAdaptersSamplesEachAsItWouldAlone) {
  const std::shared_ptr<const Adapter> mirror = MirrorAdapter();
  ASSERT_NE(mirror, nullptr);
  const LoraTerm full[] = {{mirror.get(), 1.0f}}, half[] = {{mirror.get(), 0.5f}};
  const LoraTerms terms[] = {full, {}, half, full};
  const float thresholds[] = {0, 0, 0.3f, 0.3f};
  const Request r =
      Parse(R"({"prompt":"a large red circle on the left on a blue background","size":"128x128",)"
            R"("seed":1,"steps":12,"guidance":4})");
  const std::vector<float> cond = EncodeCondition(r);
  std::vector<float> alone[4], batched[4];
  StepCache caches[4];
  for (int k = 0; k < 4; ++k) {
    alone[k] = batched[k] = InitialNoise(r);
    StepCache c;
    c.threshold = caches[k].threshold = thresholds[k];
    for (int i = 0; i < r.steps; ++i) {
      DenoiseStep(r, cond.data(), i, alone[k], nullptr, nullptr, &c, terms[k]);
    }
    EXPECT_EQ(c.skipped > 0, thresholds[k] > 0) << "job " << k;
  }
  for (int i = 0; i < r.steps; ++i) {
    std::vector<SampleStep> items;
    for (int k = 0; k < 4; ++k) {
      items.push_back({&r, cond.data(), i, &batched[k], nullptr, nullptr, &caches[k], terms[k]});
    }
    DenoiseSteps(items, /*batched=*/true);
  }
  for (int k = 0; k < 4; ++k) {
    float worst = 0;
    for (std::size_t i = 0; i < alone[k].size(); ++i) {
      worst = std::max(worst, std::fabs(alone[k][i] - batched[k][i]));
    }
    EXPECT_LT(worst, 1e-3f) << "job " << k;
  }
  float apart = 0;
  for (std::size_t i = 0; i < alone[0].size(); ++i) {
    apart = std::max(apart, std::fabs(alone[0][i] - alone[1][i]));
  }
  EXPECT_GT(apart, 0.5f) << "the adapted job differs from the base one";
}

// An adapter file is refused by name when it does not fit the model.
TEST(ReferenceModelsTest, AdaptersThatDoNotFitAreRefusedByName) {
  auto file = [](std::map<std::string, std::string> meta,
                 std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors) {
    nlohmann::json h;
    h["__metadata__"] = meta;
    std::size_t offset = 0;
    for (const auto& [name, shape] : tensors) {
      std::size_t n = 4;
      for (auto d : shape) {
        n *= static_cast<std::size_t>(d);
      }
      h[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + n}}};
      offset += n;
    }
    std::string head = h.dump();
    std::string out(8, '\0');
    const std::uint64_t len = head.size();
    std::memcpy(out.data(), &len, 8);
    return out + head + std::string(offset, '\0');
  };
  const std::map<std::string, std::string> meta = {
      {"format", "sluice-lora"}, {"version", "1"}, {"base", "sluice-reference/2"}, {"rank", "4"}};
  const auto ok =
      file(meta, {{"dit.blocks.0.qkv.lora_a", {96, 4}}, {"dit.blocks.0.qkv.lora_b", {4, 288}}});
  ASSERT_TRUE(Adapter::Parse(ok).ok()) << Adapter::Parse(ok).status().ToString();
  auto refused = [](const std::string& bytes) {
    Result<std::shared_ptr<const Adapter>> a = Adapter::Parse(bytes);
    EXPECT_FALSE(a.ok());
    return a.ok() ? std::string() : std::string(a.status().message());
  };
  auto m = meta;
  m["base"] = "other/1";
  EXPECT_NE(refused(file(m, {{"dit.blocks.0.qkv.lora_a", {96, 4}},
                             {"dit.blocks.0.qkv.lora_b", {4, 288}}}))
                .find("base"),
            std::string::npos);
  m = meta;
  m["rank"] = "65";
  EXPECT_NE(refused(file(m, {})).find("rank"), std::string::npos);
  EXPECT_NE(refused(file(meta, {{"dit.blocks.0.qkv.lora_a", {96, 4}},
                                {"dit.blocks.0.qkv.lora_b", {4, 96}}}))
                .find("dit.blocks.0.qkv.lora_b is [4, 96], want [4, 288]"),
            std::string::npos);
  EXPECT_NE(refused(file(meta, {{"dit.blocks.0.qkv.lora_a", {96, 4}}})).find("missing"),
            std::string::npos);
  EXPECT_NE(refused(file(meta, {{"dit.blocks.0.qkv.lora_a", {96, 4}},
                                {"dit.blocks.0.qkv.lora_b", {4, 288}},
                                {"dit.blocks.9.qkv.lora_a", {96, 4}}}))
                .find("adapt no layer"),
            std::string::npos);
  EXPECT_NE(refused(file(meta, {})).find("no layer is adapted"), std::string::npos);
}

TEST(ReferenceRequestTest, ParsesAdaptersAndNamesBadOnes) {
  const Request r =
      Parse(R"({"prompt":"x","lora":[{"name":"mirror","scale":0.5,"digest":"0123456789abcdef"},)"
            R"({"name":"b"}]})");
  ASSERT_EQ(r.lora.size(), 2u);
  EXPECT_EQ(r.lora[0].name, "mirror");
  EXPECT_EQ(r.lora[0].scale, 0.5f);
  EXPECT_EQ(r.lora[0].digest, "0123456789abcdef");
  EXPECT_EQ(r.lora[1].scale, 1.0f);
  for (const auto& [bad, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"prompt":"x","lora":{"name":"a"}})", "lora: "},
           {R"({"prompt":"x","lora":[{"scale":1}]})", "lora[0].name: "},
           {R"({"prompt":"x","lora":[{"name":"a/b"}]})", "lora[0].name: "},
           {R"({"prompt":"x","lora":[{"name":"a"},{"name":"b","scale":5}]})", "lora[1].scale: "},
           {R"({"prompt":"x","lora":[{"name":"a","scale":"1"}]})", "lora[0].scale: "},
           {R"({"prompt":"x","lora":[{"name":"a","digest":"xyz"}]})", "lora[0].digest: "},
           {R"({"prompt":"x","lora":[{"name":"a"},{"name":"a"},{"name":"a"},{"name":"a"},)"
            R"({"name":"a"}]})",
            "lora: "}}) {
    const Status s = ParseRequest(bad, 3, 4.0f).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s.message().rfind(field, 0), 0u) << s.message();
  }
}

// The mirror's frames 0, 8 and 16 of a 17-frame video, side by side
// (python/sluice_model/golden.py): the temporal latent and its decoding
// agree across runtimes too, and the circle moves right.
TEST(ReferenceModelsTest, MatchesThePyTorchMirrorsGoldenVideo) {
  auto want = GoldenPng("reference_torch_video_128.png");
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  ASSERT_EQ(want->width, 384);
  ASSERT_EQ(want->height, 128);
  const Request r =
      Parse(R"({"prompt":"a large red circle moving right on a blue background","size":"128x128",)"
            R"("frames":17,"seed":1,"steps":12,"guidance":4})");
  auto got = GenerateAll(r);
  ASSERT_TRUE(got.ok());
  auto frames = media::ReadTar(got->first);
  ASSERT_TRUE(frames.ok());
  ASSERT_EQ(frames->size(), 17u);
  std::vector<double> red_x;
  for (int k = 0; k < 3; ++k) {
    auto px = media::DecodePng((*frames)[static_cast<std::size_t>(8 * k)]);
    ASSERT_TRUE(px.ok());
    ASSERT_EQ(px->rgb.size(), 128u * 128 * 3);
    std::vector<std::uint8_t> tile(px->rgb.size());
    double sum_x = 0, reds = 0;
    for (int y = 0; y < 128; ++y) {
      for (int x = 0; x < 128; ++x) {
        for (int c = 0; c < 3; ++c) {
          tile[(static_cast<std::size_t>(y) * 128 + x) * 3 + c] =
              want->rgb[(static_cast<std::size_t>(y) * 384 + 128 * k + x) * 3 + c];
        }
        const std::uint8_t* p = &px->rgb[(static_cast<std::size_t>(y) * 128 + x) * 3];
        if (p[0] > 150 && p[2] < 100) {
          sum_x += x;
          reds += 1;
        }
      }
    }
    EXPECT_GE(Psnr(px->rgb, tile), 40.0) << "frame " << 8 * k;
    ASSERT_GT(reds, 50) << "no red object in frame " << 8 * k;
    red_x.push_back(sum_x / reds);
  }
  EXPECT_LT(red_x[0] + 20, red_x[1]);  // Left of centre, then right of it.
  EXPECT_LT(red_x[1] + 20, red_x[2]);
}

}  // namespace
}  // namespace sluice::reference
