// The reference denoiser (models.h): a DiT over patchified latent tokens,
// split into its embedding, its blocks and its output layer so a sampler
// can share the embedding between classifier-free guidance's branches and
// skip the blocks on a step the step cache deems unchanged (pipeline.h).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/reference/adapter.h"
#include "runtime/reference/models.h"
#include "runtime/reference/ops.h"

namespace sluice::reference {
namespace {

constexpr int kTokenWidth = kLatentChannels * kPatch * kPatch;

// Offsets of latent cells within [kLatentChannels, t, h, w] for token (t,
// i, j): channels × kPatch × kPatch cells.
struct PatchIndex {
  explicit PatchIndex(const LatentShape& s)
      : w(s.w),
        plane(static_cast<std::size_t>(s.h) * s.w),
        channel(static_cast<std::size_t>(s.t) * plane) {}
  std::size_t operator()(int c, int t, int i, int di, int j, int dj) const {
    return c * channel + t * plane + static_cast<std::size_t>(i * kPatch + di) * w +
           static_cast<std::size_t>(j * kPatch + dj);
  }
  int w;
  std::size_t plane, channel;
};

// Calls f(token row index, t, i, j) for each token in order.
template <typename F>
void ForEachToken(const LatentShape& s, F&& f) {
  const int hp = s.h / kPatch, wp = s.w / kPatch;
  for (int t = 0, tok = 0; t < s.t; ++t) {
    for (int i = 0; i < hp; ++i) {
      for (int j = 0; j < wp; ++j, ++tok) {
        f(tok, t, i, j);
      }
    }
  }
}

}  // namespace

Denoiser::Denoiser(std::shared_ptr<const WeightsFile> w, float position_scale)
    : w_(std::move(w)), position_scale_(position_scale) {}

std::vector<float> Denoiser::CrossKv(const float* cond) const {
  constexpr std::size_t per_block = static_cast<std::size_t>(kTextLen) * 2 * kDim;
  std::vector<float> kv(kCrossKvFloats);
  for (int b = 0; b < kDepth; ++b) {
    Linear(cond, kTextLen, kTextDim, W("dit.blocks." + std::to_string(b) + ".xkv"), nullptr,
           2 * kDim, kv.data() + static_cast<std::size_t>(b) * per_block);
  }
  return kv;
}

void Denoiser::Embed(const float* x, const LatentShape& s, float sigma, float* X, float* c) const {
  constexpr int d = kDim, in = kTokenWidth, p = kPatch;
  const int n = s.tokens();
  const PatchIndex cell(s);
  // Patchify: token (t, i, j) holds channels × p × p cells.
  std::vector<float> tokens(static_cast<std::size_t>(n) * in);
  ForEachToken(s, [&](int tok, int t, int i, int j) {
    float* row = tokens.data() + static_cast<std::size_t>(tok) * in;
    for (int ch = 0; ch < kLatentChannels; ++ch) {
      for (int di = 0; di < p; ++di) {
        for (int dj = 0; dj < p; ++dj) {
          row[(ch * p + di) * p + dj] = x[cell(ch, t, i, di, j, dj)];
        }
      }
    }
  });
  Linear(tokens.data(), n, in, W("dit.patch"), W("dit.patch_b"), d, X);
  // Positions: 3 × sinusoids of s t (d/4 wide), s i and s j (3d/8 each), s
  // the position scale.
  constexpr int dt = d / 4, dij = 3 * d / 8;
  float pos[d];
  ForEachToken(s, [&](int tok, int t, int i, int j) {
    Sinusoidal(position_scale_ * static_cast<float>(t), dt, pos);
    Sinusoidal(position_scale_ * static_cast<float>(i), dij, pos + dt);
    Sinusoidal(position_scale_ * static_cast<float>(j), dij, pos + dt + dij);
    float* row = X + static_cast<std::size_t>(tok) * d;
    for (int k = 0; k < d; ++k) {
      row[k] += 3.0f * pos[k];
    }
  });
  // Timestep conditioning.
  float temb[64], c1[d];
  Sinusoidal(sigma * 1000.0f, 64, temb);
  Linear(temb, 1, 64, W("dit.t1"), W("dit.t1_b"), d, c1);
  Silu(c1, d);
  Linear(c1, 1, d, W("dit.t2"), W("dit.t2_b"), d, c);
  Silu(c, d);
}

void Denoiser::ModulatedInput(const float* X, int n, const float* c, float* out) const {
  constexpr int d = kDim;
  float mod[6 * d];
  Linear(c, 1, d, W("dit.blocks.0.ada"), W("dit.blocks.0.ada_b"), 6 * d, mod);
  std::memcpy(out, X, static_cast<std::size_t>(n) * d * sizeof(float));
  LayerNorm(out, n, d);
  Modulate(out, n, d, mod, mod + d);
}

void Denoiser::Blocks(float* X, int n, const float* c, const float* cond, const float* cross_kv,
                      LoraTerms lora) const {
  BlocksBatch(X, 1, n, &c, &cond, &cross_kv, &lora);
}

void Denoiser::BlocksBatch(float* X, int batch, int n, const float* const* c,
                           const float* const* cond, const float* const* cross_kv,
                           const LoraTerms* lora) const {
  constexpr int d = kDim;
  const int rows = batch * n;  // The products run over every sample's tokens at once.
  const std::size_t per = static_cast<std::size_t>(n) * d, size = per * batch;
  // The thread's buffers, reused from call to call (a fresh one is first-
  // touched page by page: the larger a batch, the more that costs).
  struct Buffers {
    std::vector<float> H, qkv, A, F, kv, scratch, mods, low_rank;
  };
  thread_local Buffers buf;
  buf.H.resize(size);
  buf.qkv.resize(size * 3);
  buf.A.resize(size);
  buf.F.resize(size * 4);
  buf.kv.resize(static_cast<std::size_t>(kTextLen) * 2 * d);
  buf.mods.resize(static_cast<std::size_t>(batch) * 6 * d);
  std::vector<float>&H = buf.H, &qkv = buf.qkv, &A = buf.A, &F = buf.F, &kv = buf.kv,
  &scratch = buf.scratch, &mods = buf.mods;
  // Each sample's adapters' updates of a layer's output y [rows, out] from
  // its input x [rows, in] (per sample: a batch may mix adapters). Adjacent
  // samples with the same adapters and scales (guidance's two branches of
  // a job, say) go as one product over their rows.
  auto same = [](LoraTerms a, LoraTerms b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](const LoraTerm& p, const LoraTerm& q) {
                        return p.adapter == q.adapter && p.scale == q.scale;
                      });
  };
  auto adapt = [&](int block, AdaptedLayer layer, const float* x, int in, float* y, int out) {
    for (int s = 0; lora != nullptr && s < batch;) {
      int e = s + 1;
      while (e < batch && same(lora[s], lora[e])) {
        ++e;
      }
      if (!lora[s].empty()) {
        AddLora(x + s * static_cast<std::size_t>(n) * in, (e - s) * n, in, lora[s], block, layer,
                out, y + s * static_cast<std::size_t>(n) * out, buf.low_rank);
      }
      s = e;
    }
  };
  for (int bi = 0; bi < kDepth; ++bi) {
    const std::string b = "dit.blocks." + std::to_string(bi) + ".";
    for (int s = 0; s < batch; ++s) {
      Linear(c[s], 1, d, W(b + "ada"), W(b + "ada_b"), 6 * d, mods.data() + s * 6 * d);
    }
    // Sample s's modulation part k (0..5: shift 1, scale 1, gate 1, shift 2,
    // scale 2, gate 2).
    auto mod = [&](int s, int k) { return mods.data() + (s * 6 + k) * d; };
    auto rows_of = [&](float* m, int s) { return m + s * per; };
    // Self-attention over each sample's tokens (space and time).
    std::memcpy(H.data(), X, size * sizeof(float));
    LayerNorm(H.data(), rows, d);
    for (int s = 0; s < batch; ++s) {
      Modulate(rows_of(H.data(), s), n, d, mod(s, 0), mod(s, 1));
    }
    Linear(H.data(), rows, d, W(b + "qkv"), W(b + "qkv_b"), 3 * d, qkv.data());
    adapt(bi, AdaptedLayer::kQkv, H.data(), d, qkv.data(), 3 * d);
    for (int s = 0; s < batch; ++s) {
      const float* q = qkv.data() + s * per * 3;
      Attention(q, 3 * d, q + d, 3 * d, q + 2 * d, 3 * d, n, n, d, kHeads, n, rows_of(A.data(), s),
                d, scratch);
    }
    Linear(A.data(), rows, d, W(b + "proj"), W(b + "proj_b"), d, H.data());
    adapt(bi, AdaptedLayer::kProj, A.data(), d, H.data(), d);
    for (int s = 0; s < batch; ++s) {
      AddGated(rows_of(X, s), rows_of(H.data(), s), n, d, mod(s, 2));
    }
    // Cross-attention to each sample's text condition.
    std::memcpy(H.data(), X, size * sizeof(float));
    LayerNorm(H.data(), rows, d);
    Linear(H.data(), rows, d, W(b + "xq"), nullptr, d, qkv.data());
    adapt(bi, AdaptedLayer::kXq, H.data(), d, qkv.data(), d);
    for (int s = 0; s < batch; ++s) {
      const float* keys = kv.data();
      if (cross_kv[s] != nullptr) {
        keys = cross_kv[s] + static_cast<std::size_t>(bi) * kTextLen * 2 * d;
      } else {
        Linear(cond[s], kTextLen, kTextDim, W(b + "xkv"), nullptr, 2 * d, kv.data());
      }
      Attention(rows_of(qkv.data(), s), d, keys, 2 * d, keys + d, 2 * d, n, kTextLen, d, kHeads,
                kTextLen, rows_of(A.data(), s), d, scratch);
    }
    Linear(A.data(), rows, d, W(b + "xproj"), nullptr, d, H.data());
    adapt(bi, AdaptedLayer::kXproj, A.data(), d, H.data(), d);
    AddGated(X, H.data(), rows, d, nullptr);
    // MLP.
    std::memcpy(H.data(), X, size * sizeof(float));
    LayerNorm(H.data(), rows, d);
    for (int s = 0; s < batch; ++s) {
      Modulate(rows_of(H.data(), s), n, d, mod(s, 3), mod(s, 4));
    }
    Linear(H.data(), rows, d, W(b + "fc1"), W(b + "fc1_b"), 4 * d, F.data());
    adapt(bi, AdaptedLayer::kFc1, H.data(), d, F.data(), 4 * d);
    Gelu(F.data(), size * 4);
    Linear(F.data(), rows, 4 * d, W(b + "fc2"), W(b + "fc2_b"), d, H.data());
    adapt(bi, AdaptedLayer::kFc2, F.data(), 4 * d, H.data(), d);
    for (int s = 0; s < batch; ++s) {
      AddGated(rows_of(X, s), rows_of(H.data(), s), n, d, mod(s, 5));
    }
  }
}

void Denoiser::Head(float* X, const LatentShape& s, const float* c, float* v) const {
  constexpr int d = kDim, in = kTokenWidth, p = kPatch;
  const int n = s.tokens();
  float mod[2 * d];
  Linear(c, 1, d, W("dit.final_ada"), W("dit.final_ada_b"), 2 * d, mod);
  LayerNorm(X, n, d);
  Modulate(X, n, d, mod, mod + d);
  std::vector<float> tokens(static_cast<std::size_t>(n) * in);
  Linear(X, n, d, W("dit.out"), W("dit.out_b"), in, tokens.data());
  // Unpatchify.
  const PatchIndex cell(s);
  ForEachToken(s, [&](int tok, int t, int i, int j) {
    const float* row = tokens.data() + static_cast<std::size_t>(tok) * in;
    for (int ch = 0; ch < kLatentChannels; ++ch) {
      for (int di = 0; di < p; ++di) {
        for (int dj = 0; dj < p; ++dj) {
          v[cell(ch, t, i, di, j, dj)] = row[(ch * p + di) * p + dj];
        }
      }
    }
  });
}

void Denoiser::Velocity(const float* x, const LatentShape& s, float sigma, const float* cond,
                        float* v, const float* cross_kv, LoraTerms lora) const {
  const int n = s.tokens();
  std::vector<float> X(static_cast<std::size_t>(n) * kDim);
  float c[kDim];
  Embed(x, s, sigma, X.data(), c);
  Blocks(X.data(), n, c, cond, cross_kv, lora);
  Head(X.data(), s, c, v);
}

}  // namespace sluice::reference
