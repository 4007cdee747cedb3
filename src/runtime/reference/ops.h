// Numeric building blocks of the reference stages: row-major float32
// tensors, matrix products through BLAS (sgemm), everything else as plain
// loops in a fixed order. Every function is deterministic: the same inputs
// give the same bits on one machine, whatever thread calls it, because
// each call runs on the calling thread alone (BLAS is limited to one
// thread per call by `UseOneBlasThreadPerCall`).
#ifndef SLUICE_RUNTIME_REFERENCE_OPS_H_
#define SLUICE_RUNTIME_REFERENCE_OPS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::reference {

// Limits BLAS to the calling thread (no thread-count-dependent work split).
// Idempotent; call before the first product.
void UseOneBlasThreadPerCall();

// y[n, out] = x[n, in] · w[in, out] (+ b[out] when b is not null). Rows of
// x and y are `ldx` / `ldy` floats apart.
void Linear(const float* x, int n, int in, int ldx, const float* w, const float* b, int out,
            float* y, int ldy);
inline void Linear(const float* x, int n, int in, const float* w, const float* b, int out,
                   float* y) {
  Linear(x, n, in, in, w, b, out, y, out);
}

// y[n, out] += alpha · x[n, in] · w[in, out] (low-rank updates).
void LinearAccumulate(const float* x, int n, int in, const float* w, float alpha, int out,
                      float* y);

// x ← x · (1 + scale) + shift, per row of d (adaptive layer norm's
// modulation; shift and scale are d wide).
void Modulate(float* x, int n, int d, const float* shift, const float* scale);
// x += gate ⊙ y, per row of d (gate null: 1).
void AddGated(float* x, const float* y, int n, int d, const float* gate);

// Normalizes each of the n rows of d values in place (no affine; eps 1e-6).
void LayerNorm(float* x, int n, int d);
void Gelu(float* x, std::size_t n);  // tanh approximation.
void Silu(float* x, std::size_t n);
void Tanh(float* x, std::size_t n);

// Multi-head scaled dot-product attention. q: nq rows, k and v: nk rows,
// each `d` wide (heads × d/heads) with the given row strides; keys at
// index >= key_len are masked. out: nq rows of d, stride ldo. `scratch`
// is resized to nq × nk.
void Attention(const float* q, int ldq, const float* k, int ldk, const float* v, int ldv, int nq,
               int nk, int d, int heads, int key_len, float* out, int ldo,
               std::vector<float>& scratch);

// 3×3 convolution, zero padding 1, stride 1 or 2: x [cin, h, w] → y [cout,
// oh, ow] with oh = (h − 1) / stride + 1 (ow alike). weight [cout, cin·9],
// bias [cout]. `col` is resized to cin·9 × oh·ow.
void Conv3x3(const float* x, int cin, int h, int w, const float* weight, const float* bias,
             int cout, float* y, std::vector<float>& col, int stride = 1);
// Nearest-neighbour 2× upsampling: x [c, h, w] → y [c, 2h, 2w].
void Upsample2x(const float* x, int c, int h, int w, float* y);

// out[0..dim): sin/cos of value at geometric frequencies (dim even).
void Sinusoidal(float value, int dim, float* out);

// Deterministic generator (splitmix64) for weights and initial noise: the
// same seed gives the same sequence on every platform.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next();
  float Uniform();  // [0, 1)
  float Normal();   // Box-Muller, one value per call.
  // n values uniform in [-scale, scale).
  std::vector<float> Fill(std::size_t n, float scale);

 private:
  std::uint64_t state_;
};

}  // namespace sluice::reference

#endif  // SLUICE_RUNTIME_REFERENCE_OPS_H_
