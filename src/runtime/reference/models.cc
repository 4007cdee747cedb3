#include "runtime/reference/models.h"

#include <algorithm>
#include <cmath>

#include "runtime/reference/ops.h"

namespace sluice::reference {
namespace {

constexpr int kBos = 256, kPad = 257, kVocab = 258;
constexpr std::uint64_t kModelSeed = 0x5a1c3cc0ffee5eedull;

// Weights for a layer with `fan_in` inputs: uniform, variance gain/fan_in.
std::vector<float> Weights(Rng& rng, std::size_t n, int fan_in, float gain = 1.0f) {
  return rng.Fill(n, std::sqrt(3.0f * gain / static_cast<float>(fan_in)));
}

std::vector<float> Biases(Rng& rng, std::size_t n) {
  return rng.Fill(n, 0.02f);
}

// x ← x · (1 + scale) + shift, per row of d.
void Modulate(float* x, int n, int d, const float* shift, const float* scale) {
  for (int r = 0; r < n; ++r) {
    float* row = x + static_cast<std::size_t>(r) * d;
    for (int i = 0; i < d; ++i) {
      row[i] = row[i] * (1.0f + scale[i]) + shift[i];
    }
  }
}

// x += gate ⊙ y, per row of d (gate null: 1).
void AddGated(float* x, const float* y, int n, int d, const float* gate) {
  for (int r = 0; r < n; ++r) {
    float* row = x + static_cast<std::size_t>(r) * d;
    const float* add = y + static_cast<std::size_t>(r) * d;
    for (int i = 0; i < d; ++i) {
      row[i] += gate == nullptr ? add[i] : gate[i] * add[i];
    }
  }
}

}  // namespace

TextEncoder::TextEncoder(std::uint64_t seed) {
  Rng rng(seed);
  constexpr int d = kTextDim;
  embed_ = rng.Fill(static_cast<std::size_t>(kVocab) * d, 1.0f);
  for (int l = 0; l < 2; ++l) {
    Layer layer;
    layer.qkv = Weights(rng, d * 3 * d, d);
    layer.qkv_b = Biases(rng, 3 * d);
    layer.proj = Weights(rng, d * d, d);
    layer.proj_b = Biases(rng, d);
    layer.fc1 = Weights(rng, d * 4 * d, d, 2.0f);
    layer.fc1_b = Biases(rng, 4 * d);
    layer.fc2 = Weights(rng, 4 * d * d, 4 * d);
    layer.fc2_b = Biases(rng, d);
    layers_.push_back(std::move(layer));
  }
}

std::vector<float> TextEncoder::Encode(std::string_view text) const {
  constexpr int d = kTextDim, n = kTextLen;
  const int len = static_cast<int>(std::min<std::size_t>(text.size() + 1, n));
  std::vector<float> x(static_cast<std::size_t>(n) * d);
  std::vector<float> pos(d);
  for (int i = 0; i < n; ++i) {
    const int tok =
        i == 0
            ? kBos
            : (i < len ? static_cast<unsigned char>(text[static_cast<std::size_t>(i - 1)]) : kPad);
    Sinusoidal(static_cast<float>(i), d, pos.data());
    for (int c = 0; c < d; ++c) {
      x[static_cast<std::size_t>(i) * d + c] =
          embed_[static_cast<std::size_t>(tok) * d + c] + pos[c];
    }
  }
  std::vector<float> h(x.size()), qkv(x.size() * 3), a(x.size()), f(x.size() * 4), scratch;
  for (const Layer& l : layers_) {
    h = x;
    LayerNorm(h.data(), n, d);
    Linear(h.data(), n, d, l.qkv.data(), l.qkv_b.data(), 3 * d, qkv.data());
    Attention(qkv.data(), 3 * d, qkv.data() + d, 3 * d, qkv.data() + 2 * d, 3 * d, n, n, d, 4, len,
              a.data(), d, scratch);
    Linear(a.data(), n, d, l.proj.data(), l.proj_b.data(), d, h.data());
    AddGated(x.data(), h.data(), n, d, nullptr);
    h = x;
    LayerNorm(h.data(), n, d);
    Linear(h.data(), n, d, l.fc1.data(), l.fc1_b.data(), 4 * d, f.data());
    Gelu(f.data(), f.size());
    Linear(f.data(), n, 4 * d, l.fc2.data(), l.fc2_b.data(), d, h.data());
    AddGated(x.data(), h.data(), n, d, nullptr);
  }
  LayerNorm(x.data(), n, d);
  return x;
}

Denoiser::Denoiser(std::uint64_t seed) {
  Rng rng(seed);
  constexpr int d = kDim, in = kLatentChannels * kPatch * kPatch;
  patch_ = Weights(rng, in * d, in);
  patch_b_ = Biases(rng, d);
  t1_ = Weights(rng, 64 * d, 64, 2.0f);
  t1_b_ = Biases(rng, d);
  t2_ = Weights(rng, d * d, d);
  t2_b_ = Biases(rng, d);
  for (int b = 0; b < kDepth; ++b) {
    Block k;
    k.ada = Weights(rng, d * 6 * d, d, 0.25f);
    k.ada_b = Biases(rng, 6 * d);
    k.qkv = Weights(rng, d * 3 * d, d);
    k.qkv_b = Biases(rng, 3 * d);
    k.proj = Weights(rng, d * d, d);
    k.proj_b = Biases(rng, d);
    k.xq = Weights(rng, d * d, d);
    k.xkv = Weights(rng, kTextDim * 2 * d, kTextDim);
    k.xproj = Weights(rng, d * d, d);
    k.fc1 = Weights(rng, d * 4 * d, d, 2.0f);
    k.fc1_b = Biases(rng, 4 * d);
    k.fc2 = Weights(rng, 4 * d * d, 4 * d);
    k.fc2_b = Biases(rng, d);
    blocks_.push_back(std::move(k));
  }
  final_ada_ = Weights(rng, d * 2 * d, d, 0.25f);
  final_ada_b_ = Biases(rng, 2 * d);
  out_ = Weights(rng, d * in, d);
  out_b_ = Biases(rng, in);
}

std::vector<float> Denoiser::CrossKv(const float* cond) const {
  constexpr std::size_t per_block = static_cast<std::size_t>(kTextLen) * 2 * kDim;
  std::vector<float> kv(kCrossKvFloats);
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    Linear(cond, kTextLen, kTextDim, blocks_[b].xkv.data(), nullptr, 2 * kDim,
           kv.data() + b * per_block);
  }
  return kv;
}

void Denoiser::Velocity(const float* x, const LatentShape& s, float sigma, const float* cond,
                        float* v, const float* cross_kv) const {
  constexpr int d = kDim, in = kLatentChannels * kPatch * kPatch, p = kPatch;
  const int hp = s.h / p, wp = s.w / p, n = s.tokens();
  const std::size_t plane = static_cast<std::size_t>(s.h) * s.w;
  const std::size_t frame_stride = plane;  // Within a channel: [t, h, w].
  const std::size_t channel_stride = static_cast<std::size_t>(s.t) * plane;
  auto cell = [&](int c, int t, int i, int di, int j, int dj) {
    return c * channel_stride + t * frame_stride + static_cast<std::size_t>(i * p + di) * s.w +
           static_cast<std::size_t>(j * p + dj);
  };
  // Patchify: token (t, i, j) holds channels × 2 × 2 cells.
  std::vector<float> tokens(static_cast<std::size_t>(n) * in);
  for (int t = 0, tok = 0; t < s.t; ++t) {
    for (int i = 0; i < hp; ++i) {
      for (int j = 0; j < wp; ++j, ++tok) {
        float* row = tokens.data() + static_cast<std::size_t>(tok) * in;
        for (int c = 0; c < kLatentChannels; ++c) {
          for (int di = 0; di < p; ++di) {
            for (int dj = 0; dj < p; ++dj) {
              row[(c * p + di) * p + dj] = x[cell(c, t, i, di, j, dj)];
            }
          }
        }
      }
    }
  }
  std::vector<float> X(static_cast<std::size_t>(n) * d);
  Linear(tokens.data(), n, in, patch_.data(), patch_b_.data(), d, X.data());
  {
    float pos[d];
    for (int t = 0, tok = 0; t < s.t; ++t) {
      for (int i = 0; i < hp; ++i) {
        for (int j = 0; j < wp; ++j, ++tok) {
          Sinusoidal(0.25f * static_cast<float>(t), 16, pos);
          Sinusoidal(0.25f * static_cast<float>(i), 24, pos + 16);
          Sinusoidal(0.25f * static_cast<float>(j), 24, pos + 40);
          float* row = X.data() + static_cast<std::size_t>(tok) * d;
          for (int c = 0; c < d; ++c) {
            row[c] += 3.0f * pos[c];
          }
        }
      }
    }
  }
  // Timestep conditioning.
  float temb[64], c1[d], c2[d];
  Sinusoidal(sigma * 1000.0f, 64, temb);
  Linear(temb, 1, 64, t1_.data(), t1_b_.data(), d, c1);
  Silu(c1, d);
  Linear(c1, 1, d, t2_.data(), t2_b_.data(), d, c2);
  Silu(c2, d);

  std::vector<float> H(X.size()), qkv(X.size() * 3), A(X.size()), F(X.size() * 4),
      kv(static_cast<std::size_t>(kTextLen) * 2 * d), scratch;
  float mod[6 * d];
  for (std::size_t bi = 0; bi < blocks_.size(); ++bi) {
    const Block& b = blocks_[bi];
    Linear(c2, 1, d, b.ada.data(), b.ada_b.data(), 6 * d, mod);
    const float *sh1 = mod, *sc1 = mod + d, *g1 = mod + 2 * d, *sh2 = mod + 3 * d,
                *sc2 = mod + 4 * d, *g2 = mod + 5 * d;
    // Self-attention over all tokens (space and time).
    H = X;
    LayerNorm(H.data(), n, d);
    Modulate(H.data(), n, d, sh1, sc1);
    Linear(H.data(), n, d, b.qkv.data(), b.qkv_b.data(), 3 * d, qkv.data());
    Attention(qkv.data(), 3 * d, qkv.data() + d, 3 * d, qkv.data() + 2 * d, 3 * d, n, n, d, kHeads,
              n, A.data(), d, scratch);
    Linear(A.data(), n, d, b.proj.data(), b.proj_b.data(), d, H.data());
    AddGated(X.data(), H.data(), n, d, g1);
    // Cross-attention to the text condition.
    H = X;
    LayerNorm(H.data(), n, d);
    Linear(H.data(), n, d, b.xq.data(), nullptr, d, qkv.data());
    const float* keys = kv.data();
    if (cross_kv != nullptr) {
      keys = cross_kv + bi * static_cast<std::size_t>(kTextLen) * 2 * d;
    } else {
      Linear(cond, kTextLen, kTextDim, b.xkv.data(), nullptr, 2 * d, kv.data());
    }
    Attention(qkv.data(), d, keys, 2 * d, keys + d, 2 * d, n, kTextLen, d, kHeads, kTextLen,
              A.data(), d, scratch);
    Linear(A.data(), n, d, b.xproj.data(), nullptr, d, H.data());
    AddGated(X.data(), H.data(), n, d, nullptr);
    // MLP.
    H = X;
    LayerNorm(H.data(), n, d);
    Modulate(H.data(), n, d, sh2, sc2);
    Linear(H.data(), n, d, b.fc1.data(), b.fc1_b.data(), 4 * d, F.data());
    Gelu(F.data(), F.size());
    Linear(F.data(), n, 4 * d, b.fc2.data(), b.fc2_b.data(), d, H.data());
    AddGated(X.data(), H.data(), n, d, g2);
  }
  Linear(c2, 1, d, final_ada_.data(), final_ada_b_.data(), 2 * d, mod);
  LayerNorm(X.data(), n, d);
  Modulate(X.data(), n, d, mod, mod + d);
  Linear(X.data(), n, d, out_.data(), out_b_.data(), in, tokens.data());
  // Unpatchify.
  for (int t = 0, tok = 0; t < s.t; ++t) {
    for (int i = 0; i < hp; ++i) {
      for (int j = 0; j < wp; ++j, ++tok) {
        const float* row = tokens.data() + static_cast<std::size_t>(tok) * in;
        for (int c = 0; c < kLatentChannels; ++c) {
          for (int di = 0; di < p; ++di) {
            for (int dj = 0; dj < p; ++dj) {
              v[cell(c, t, i, di, j, dj)] = row[(c * p + di) * p + dj];
            }
          }
        }
      }
    }
  }
}

Decoder::Decoder(std::uint64_t seed) {
  Rng rng(seed);
  const int chans[][2] = {{kLatentChannels, 64}, {64, 32}, {32, 16}, {16, 8}, {8, 3}};
  for (const auto& cc : chans) {
    Conv c;
    c.cin = cc[0];
    c.cout = cc[1];
    c.w = Weights(rng, static_cast<std::size_t>(c.cout) * c.cin * 9, c.cin * 9,
                  c.cout == 3 ? 2.0f : 1.5f);
    c.b = Biases(rng, c.cout);
    convs_.push_back(std::move(c));
  }
}

void Decoder::DecodeFrame(const float* z, int h, int w, std::uint8_t* rgb) const {
  std::vector<float> a(static_cast<std::size_t>(64) * h * w), b, col;
  Conv3x3(z, convs_[0].cin, h, w, convs_[0].w.data(), convs_[0].b.data(), convs_[0].cout, a.data(),
          col);
  Silu(a.data(), a.size());
  int ch = convs_[0].cout;
  for (int i = 1; i <= 3; ++i) {
    b.resize(a.size() * 4);
    Upsample2x(a.data(), ch, h, w, b.data());
    h *= 2;
    w *= 2;
    const Conv& c = convs_[static_cast<std::size_t>(i)];
    a.resize(static_cast<std::size_t>(c.cout) * h * w);
    Conv3x3(b.data(), c.cin, h, w, c.w.data(), c.b.data(), c.cout, a.data(), col);
    Silu(a.data(), a.size());
    ch = c.cout;
  }
  const Conv& out = convs_.back();
  b.resize(static_cast<std::size_t>(3) * h * w);
  Conv3x3(a.data(), out.cin, h, w, out.w.data(), out.b.data(), 3, b.data(), col);
  Tanh(b.data(), b.size());
  const std::size_t plane = static_cast<std::size_t>(h) * w;
  for (std::size_t px = 0; px < plane; ++px) {
    for (int c = 0; c < 3; ++c) {
      const float v = (b[c * plane + px] + 1.0f) * 127.5f + 0.5f;
      rgb[px * 3 + c] = static_cast<std::uint8_t>(std::clamp(v, 0.0f, 255.0f));
    }
  }
}

const Models& ReferenceModels() {
  static const Models* models = [] {
    UseOneBlasThreadPerCall();
    return new Models{TextEncoder(kModelSeed), Denoiser(kModelSeed + 1), Decoder(kModelSeed + 2)};
  }();
  return *models;
}

}  // namespace sluice::reference
