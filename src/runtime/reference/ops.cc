#include "runtime/reference/ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

namespace sluice::reference {

void UseOneBlasThreadPerCall() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void Linear(const float* x, int n, int in, int ldx, const float* w, const float* b, int out,
            float* y, int ldy) {
  float beta = 0.0f;
  if (b != nullptr) {
    for (int r = 0; r < n; ++r) {
      std::memcpy(y + static_cast<std::size_t>(r) * ldy, b, sizeof(float) * out);
    }
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, out, in, 1.0f, x, ldx, w, out, beta, y,
              ldy);
}

void LinearAccumulate(const float* x, int n, int in, const float* w, float alpha, int out,
                      float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, out, in, alpha, x, in, w, out, 1.0f, y,
              out);
}

void Modulate(float* x, int n, int d, const float* shift, const float* scale) {
  for (int r = 0; r < n; ++r) {
    float* row = x + static_cast<std::size_t>(r) * d;
    for (int i = 0; i < d; ++i) {
      row[i] = row[i] * (1.0f + scale[i]) + shift[i];
    }
  }
}

void AddGated(float* x, const float* y, int n, int d, const float* gate) {
  for (int r = 0; r < n; ++r) {
    float* row = x + static_cast<std::size_t>(r) * d;
    const float* add = y + static_cast<std::size_t>(r) * d;
    for (int i = 0; i < d; ++i) {
      row[i] += gate == nullptr ? add[i] : gate[i] * add[i];
    }
  }
}

void LayerNorm(float* x, int n, int d) {
  for (int r = 0; r < n; ++r) {
    float* row = x + static_cast<std::size_t>(r) * d;
    double mean = 0;
    for (int i = 0; i < d; ++i) {
      mean += row[i];
    }
    mean /= d;
    double var = 0;
    for (int i = 0; i < d; ++i) {
      const double c = row[i] - mean;
      var += c * c;
    }
    const double inv = 1.0 / std::sqrt(var / d + 1e-6);
    for (int i = 0; i < d; ++i) {
      row[i] = static_cast<float>((row[i] - mean) * inv);
    }
  }
}

void Gelu(float* x, std::size_t n) {
  constexpr float kC = 0.7978845608f;  // sqrt(2/pi)
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(kC * (v + 0.044715f * v * v * v)));
  }
}

void Silu(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = x[i] / (1.0f + std::exp(-x[i]));
  }
}

void Tanh(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = std::tanh(x[i]);
  }
}

void Attention(const float* q, int ldq, const float* k, int ldk, const float* v, int ldv, int nq,
               int nk, int d, int heads, int key_len, float* out, int ldo,
               std::vector<float>& scratch) {
  const int dh = d / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const int keys = std::clamp(key_len, 1, nk);
  scratch.resize(static_cast<std::size_t>(nq) * keys);
  for (int h = 0; h < heads; ++h) {
    float* s = scratch.data();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, keys, dh, scale, q + h * dh, ldq,
                k + h * dh, ldk, 0.0f, s, keys);
    for (int r = 0; r < nq; ++r) {
      float* row = s + static_cast<std::size_t>(r) * keys;
      const float mx = *std::max_element(row, row + keys);
      float sum = 0;
      for (int c = 0; c < keys; ++c) {
        row[c] = std::exp(row[c] - mx);
        sum += row[c];
      }
      const float inv = 1.0f / sum;
      for (int c = 0; c < keys; ++c) {
        row[c] *= inv;
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, dh, keys, 1.0f, s, keys, v + h * dh,
                ldv, 0.0f, out + h * dh, ldo);
  }
}

void Conv3x3(const float* x, int cin, int h, int w, const float* weight, const float* bias,
             int cout, float* y, std::vector<float>& col, int stride) {
  const int oh = (h - 1) / stride + 1, ow = (w - 1) / stride + 1;
  const std::size_t hw = static_cast<std::size_t>(h) * w;
  const std::size_t ohw = static_cast<std::size_t>(oh) * ow;
  col.assign(static_cast<std::size_t>(cin) * 9 * ohw, 0.0f);
  for (int c = 0; c < cin; ++c) {
    const float* plane = x + c * hw;
    for (int ky = 0; ky < 3; ++ky) {
      for (int kx = 0; kx < 3; ++kx) {
        float* dst = col.data() + (static_cast<std::size_t>(c) * 9 + ky * 3 + kx) * ohw;
        for (int yy = 0; yy < oh; ++yy) {
          const int sy = yy * stride + ky - 1;
          if (sy < 0 || sy >= h) {
            continue;
          }
          const float* src = plane + static_cast<std::size_t>(sy) * w;
          float* row = dst + static_cast<std::size_t>(yy) * ow;
          if (stride == 1) {
            const int x0 = std::max(0, 1 - kx), x1 = std::min(w, w + 1 - kx);
            std::memcpy(row + x0, src + x0 + kx - 1,
                        sizeof(float) * static_cast<std::size_t>(x1 - x0));
            continue;
          }
          for (int xx = 0; xx < ow; ++xx) {
            const int sx = xx * stride + kx - 1;
            if (sx >= 0 && sx < w) {
              row[xx] = src[sx];
            }
          }
        }
      }
    }
  }
  for (int o = 0; o < cout; ++o) {
    std::fill(y + o * ohw, y + (o + 1) * ohw, bias[o]);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, cout, static_cast<int>(ohw), cin * 9, 1.0f,
              weight, cin * 9, col.data(), static_cast<int>(ohw), 1.0f, y, static_cast<int>(ohw));
}

void Upsample2x(const float* x, int c, int h, int w, float* y) {
  for (int ch = 0; ch < c; ++ch) {
    for (int yy = 0; yy < 2 * h; ++yy) {
      const float* src = x + (static_cast<std::size_t>(ch) * h + yy / 2) * w;
      float* dst = y + (static_cast<std::size_t>(ch) * 2 * h + yy) * 2 * w;
      for (int xx = 0; xx < 2 * w; ++xx) {
        dst[xx] = src[xx / 2];
      }
    }
  }
}

void Sinusoidal(float value, int dim, float* out) {
  const int half = dim / 2;
  for (int i = 0; i < half; ++i) {
    const double freq = std::exp(-std::log(10000.0) * i / half);
    out[i] = static_cast<float>(std::sin(value * freq));
    out[half + i] = static_cast<float>(std::cos(value * freq));
  }
}

std::uint64_t Rng::Next() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float Rng::Uniform() {
  return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f);
}

float Rng::Normal() {
  const double u1 = (static_cast<double>(Next() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

std::vector<float> Rng::Fill(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (float& x : v) {
    x = (2.0f * Uniform() - 1.0f) * scale;
  }
  return v;
}

}  // namespace sluice::reference
