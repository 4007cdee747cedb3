#include "runtime/reference/pipeline.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "sluice/adapters.h"

#include "common/base64.h"
#include "media/frames_archive.h"
#include "media/png.h"
#include "media/resize.h"
#include "runtime/reference/ops.h"

namespace sluice::reference {
namespace {

using nlohmann::json;

Status BadRequest(std::string_view field, std::string_view what) {
  return InvalidArgumentError(std::string(field) + ": " + std::string(what));
}

// Latent cells covering `px` pixels: a whole number of the DiT's patches.
int LatentCells(int px) {
  constexpr int kTokenPx = kSpatialDown * kPatch;
  return (px + kTokenPx - 1) / kTokenPx * kPatch;
}

}  // namespace

LatentShape Request::latent() const {
  LatentShape s;
  s.t = 1 + (frames - 1 + kTemporalDown - 1) / kTemporalDown;
  s.h = LatentCells(height);
  s.w = LatentCells(width);
  return s;
}

Result<Request> ParseRequest(std::string_view text, int default_steps, float default_guidance) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) {
    return BadRequest("request", "not a JSON object");
  }
  Request r;
  r.steps = default_steps;
  r.guidance = default_guidance;
  if (!j.contains("prompt") || !j["prompt"].is_string()) {
    return BadRequest("prompt", "required, a string");
  }
  r.prompt = j["prompt"].get<std::string>();
  if (j.contains("negative_prompt")) {
    if (!j["negative_prompt"].is_string()) {
      return BadRequest("negative_prompt", "a string");
    }
    r.negative_prompt = j["negative_prompt"].get<std::string>();
  }
  const std::string size = j.value("size", json("128x128")).is_string()
                               ? j.value("size", std::string("128x128"))
                               : std::string();
  const auto x = size.find('x');
  const char* end = size.data() + size.size();
  const bool parsed =
      x != std::string::npos &&
      std::from_chars(size.data(), size.data() + x, r.width).ptr == size.data() + x &&
      std::from_chars(size.data() + x + 1, end, r.height).ptr == end && x > 0 &&
      x + 1 < size.size();
  if (!parsed || r.width < 16 || r.height < 16 || r.width > 2048 || r.height > 2048) {
    return BadRequest("size", "WIDTHxHEIGHT, each 16..2048");
  }
  if (j.contains("seed")) {
    if (!j["seed"].is_number_integer()) {
      return BadRequest("seed", "an integer");
    }
    r.seed = j["seed"].get<std::int64_t>();
  }
  if (j.contains("steps")) {
    if (!j["steps"].is_number_integer() || j["steps"] < 1 || j["steps"] > 1000) {
      return BadRequest("steps", "an integer in 1..1000");
    }
    r.steps = j["steps"].get<int>();
  }
  if (j.contains("guidance")) {
    if (!j["guidance"].is_number() || j["guidance"] < 0 || j["guidance"] > 30) {
      return BadRequest("guidance", "a number in 0..30");
    }
    r.guidance = j["guidance"].get<float>();
  }
  if (j.contains("preview_every")) {
    if (!j["preview_every"].is_number_integer() || j["preview_every"] < 0 ||
        j["preview_every"] > 1000) {
      return BadRequest("preview_every", "an integer in 0..1000");
    }
    r.preview_every = j["preview_every"].get<int>();
  }
  if (j.contains("step_cache")) {
    const json& c = j["step_cache"];
    const bool ok = c.is_object() && c.size() == 1 && c.contains("threshold") &&
                    c["threshold"].is_number() && c["threshold"] >= 0 &&
                    c["threshold"] <= StepCache::kMaxThreshold;
    if (!ok) {
      return BadRequest("step_cache", "{\"threshold\": a number in 0..1} (0: off)");
    }
    r.step_cache = c["threshold"].get<float>();
  }
  if (j.contains("lora")) {
    const json& l = j["lora"];
    if (!l.is_array() || l.size() > kMaxAdaptersPerRequest) {
      return BadRequest("lora", "a list of at most " + std::to_string(kMaxAdaptersPerRequest) +
                                    " {\"name\", \"scale\"} objects");
    }
    for (std::size_t i = 0; i < l.size(); ++i) {
      const std::string field = "lora[" + std::to_string(i) + "]";
      const json& e = l[i];
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string() ||
          !ValidAdapterName(e["name"].get<std::string>())) {
        return BadRequest(field + ".name", "required, an adapter's name");
      }
      Request::Lora a;
      a.name = e["name"].get<std::string>();
      if (e.contains("scale")) {
        if (!e["scale"].is_number() || !(e["scale"] >= -kMaxAdapterScale) ||
            !(e["scale"] <= kMaxAdapterScale)) {
          return BadRequest(field + ".scale", "a number in -4..4");
        }
        a.scale = e["scale"].get<float>();
      }
      if (e.contains("digest")) {
        if (!e["digest"].is_string() || !ValidAdapterDigest(e["digest"].get<std::string>())) {
          return BadRequest(field + ".digest", "16 hex digits");
        }
        a.digest = e["digest"].get<std::string>();
      }
      r.lora.push_back(std::move(a));
    }
  }
  if (j.contains("strength") && !j.contains("image")) {
    return BadRequest("strength", "only with an image to edit");
  }
  if (j.contains("image")) {
    if (!j["image"].is_string()) {
      return BadRequest("image", "a base64 PNG");
    }
    Result<std::string> png = internal::Base64Decode(j["image"].get<std::string>());
    if (!png.ok()) {
      return BadRequest("image", std::string(png.status().message()));
    }
    Result<media::RgbImage> picture = media::DecodePng(*png, kMaxEditPixels);
    if (!picture.ok()) {
      return BadRequest("image", std::string(picture.status().message()));
    }
    Request::Edit e;
    e.width = picture->width;
    e.height = picture->height;
    e.rgb = std::move(picture->rgb);
    if (j.contains("strength")) {
      if (!j["strength"].is_number() || !(j["strength"] > 0) || j["strength"] > 1) {
        return BadRequest("strength", "a number in (0, 1]");
      }
      e.strength = j["strength"].get<float>();
    }
    r.edit = std::move(e);
  }
  if (j.contains("frames")) {
    if (!j["frames"].is_number_integer() || j["frames"] < 1 || j["frames"] > 1024) {
      return BadRequest("frames", "an integer in 1..1024");
    }
    r.video = true;
    r.frames = j["frames"].get<int>();
    r.fps = j.value("fps", 16);
  }
  if (r.latent().tokens() > kMaxTokens) {
    return BadRequest(
        r.video ? "size/frames" : "size",
        "the reference model takes at most " + std::to_string(kMaxTokens) +
            " latent tokens (one per 16x16 pixels per 4 frames); this request needs " +
            std::to_string(r.latent().tokens()));
  }
  return r;
}

std::vector<float> EncodeCondition(const Request& r) {
  const Models& m = ReferenceModels();
  std::vector<float> out = m.text.Encode(r.prompt);
  const std::vector<float> neg = m.text.Encode(r.negative_prompt);
  out.insert(out.end(), neg.begin(), neg.end());
  return out;
}

std::vector<float> EncodeText(std::string_view text) {
  return ReferenceModels().text.Encode(text);
}

std::vector<float> InitialNoise(const Request& r) {
  Rng rng(static_cast<std::uint64_t>(r.seed) * 0x2545f4914f6cdd1dull + 0x1234567ull);
  std::vector<float> x(r.latent().elements());
  for (float& v : x) {
    v = rng.Normal();
  }
  return x;
}

namespace {

// sum |a - b| / sum |b| over n values (0 when b is all zeros and a = b).
float RelativeL1(const float* a, const float* b, std::size_t n) {
  double diff = 0, base = 0;
  for (std::size_t i = 0; i < n; ++i) {
    diff += std::fabs(static_cast<double>(a[i]) - b[i]);
    base += std::fabs(static_cast<double>(b[i]));
  }
  return base > 0 ? static_cast<float>(diff / base) : (diff > 0 ? INFINITY : 0.0f);
}

}  // namespace

void DenoiseStep(const Request& r, const float* cond, int step, std::vector<float>& x,
                 const float* negative_kv, std::vector<float>* x0, StepCache* cache,
                 LoraTerms lora) {
  SampleStep one{&r, cond, step, &x, negative_kv, x0, cache, lora};
  DenoiseSteps({&one, 1}, /*batched=*/false);
}

void DenoiseSteps(std::span<SampleStep> items, bool batched) {
  if (items.empty()) {
    return;
  }
  const Denoiser& dit = ReferenceModels().denoiser;
  const LatentShape s = items[0].r->latent();
  const int n = s.tokens();
  const std::size_t width = static_cast<std::size_t>(n) * Denoiser::kDim;
  // Per item: its timestep conditioning, and both branches' tokens
  // (conditional, unconditional) side by side in X.
  std::vector<float> X(2 * items.size() * width), cs(items.size() * Denoiser::kDim);
  std::vector<char> skip(items.size(), 0);
  std::vector<float> modulated;
  // The branches that run the blocks: their rows, conditioning, text and keys.
  std::vector<float*> run_x;
  std::vector<const float*> run_c, run_cond, run_kv;
  std::vector<LoraTerms> run_lora;
  for (std::size_t k = 0; k < items.size(); ++k) {
    SampleStep& it = items[k];
    const float sigma = 1.0f - static_cast<float>(it.step) / static_cast<float>(it.r->steps);
    float* xc = X.data() + 2 * k * width;
    float* c = cs.data() + k * Denoiser::kDim;
    // The embedding does not depend on the condition: once for both branches.
    dit.Embed(it.x->data(), s, sigma, xc, c);
    std::memcpy(xc + width, xc, width * sizeof(float));
    StepCache* cache = it.cache;
    if (cache != nullptr && cache->threshold > 0) {
      modulated.resize(width);
      dit.ModulatedInput(xc, n, c, modulated.data());
      skip[k] = cache->anchor.size() == width && cache->residual.size() == 2 * width &&
                RelativeL1(modulated.data(), cache->anchor.data(), width) < cache->threshold;
      if (!skip[k]) {
        cache->anchor.swap(modulated);
        cache->residual.resize(2 * width);
        std::memcpy(cache->residual.data(), xc, 2 * width * sizeof(float));
      }
    }
    if (skip[k]) {
      for (std::size_t i = 0; i < 2 * width; ++i) {
        xc[i] += cache->residual[i];
      }
      ++cache->skipped;
      continue;
    }
    if (cache != nullptr) {
      ++cache->computed;
    }
    for (int b = 0; b < 2; ++b) {
      run_x.push_back(xc + b * width);
      run_c.push_back(c);
      run_cond.push_back(it.cond + b * kTextLen * kTextDim);
      run_kv.push_back(b == 0 ? nullptr : it.negative_kv);
      run_lora.push_back(it.lora);
    }
  }
  // The branches that run are contiguous per item; batched, each run of
  // adjacent rows goes as one product.
  for (std::size_t i = 0; i < run_x.size();) {
    std::size_t j = i + 1;
    while (batched && j < run_x.size() && run_x[j] == run_x[j - 1] + width) {
      ++j;
    }
    dit.BlocksBatch(run_x[i], static_cast<int>(j - i), n, run_c.data() + i, run_cond.data() + i,
                    run_kv.data() + i, run_lora.data() + i);
    i = j;
  }
  std::vector<float> vc, vu;
  for (std::size_t k = 0; k < items.size(); ++k) {
    SampleStep& it = items[k];
    float* xc = X.data() + 2 * k * width;
    StepCache* cache = it.cache;
    if (!skip[k] && cache != nullptr && cache->threshold > 0) {
      for (std::size_t i = 0; i < 2 * width; ++i) {
        cache->residual[i] = xc[i] - cache->residual[i];
      }
    }
    std::vector<float>& x = *it.x;
    const float* c = cs.data() + k * Denoiser::kDim;
    vc.resize(x.size());
    vu.resize(x.size());
    dit.Head(xc, s, c, vc.data());
    dit.Head(xc + width, s, c, vu.data());
    // The network predicts the clean latent x0; guided, x0 = x0_u + g · (x0_c −
    // x0_u). The flow's velocity at x is (x − x0) / σ, so the last step
    // (σ → 0) lands on the prediction.
    const float g = it.r->guidance;
    for (std::size_t i = 0; i < x.size(); ++i) {
      vc[i] = vu[i] + g * (vc[i] - vu[i]);
    }
    const float sigma = 1.0f - static_cast<float>(it.step) / static_cast<float>(it.r->steps);
    const float next = 1.0f - static_cast<float>(it.step + 1) / static_cast<float>(it.r->steps);
    const float ratio = (next - sigma) / sigma;
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] += ratio * (x[i] - vc[i]);
    }
    if (it.x0 != nullptr) {
      it.x0->swap(vc);
    }
  }
}

namespace {

constexpr char kStepCacheMagic[4] = {'S', 'S', 'C', '1'};

struct StepCacheHeader {
  char magic[4];
  std::int32_t tokens, width, computed, skipped, has_state;
};

}  // namespace

std::string SerializeStepCache(const StepCache& c) {
  const std::size_t width = c.anchor.size();
  const bool has = width > 0 && c.residual.size() == 2 * width;
  StepCacheHeader h{};
  std::memcpy(h.magic, kStepCacheMagic, sizeof(h.magic));
  h.tokens = has ? static_cast<std::int32_t>(width / Denoiser::kDim) : 0;
  h.width = Denoiser::kDim;
  h.computed = c.computed;
  h.skipped = c.skipped;
  h.has_state = has ? 1 : 0;
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  if (has) {
    out.append(reinterpret_cast<const char*>(c.anchor.data()), width * sizeof(float));
    out.append(reinterpret_cast<const char*>(c.residual.data()), 2 * width * sizeof(float));
  }
  return out;
}

Status RestoreStepCache(std::string_view bytes, int tokens, StepCache* c) {
  StepCacheHeader h{};
  if (bytes.size() < sizeof(h)) {
    return InvalidArgumentError("step cache state: " + std::to_string(bytes.size()) +
                                " bytes, shorter than its header");
  }
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (std::memcmp(h.magic, kStepCacheMagic, sizeof(h.magic)) != 0 || h.width != Denoiser::kDim ||
      h.computed < 0 || h.skipped < 0 || (h.has_state != 0 && h.has_state != 1)) {
    return InvalidArgumentError("step cache state: not one (magic, width or counts)");
  }
  const std::size_t width = static_cast<std::size_t>(tokens) * Denoiser::kDim;
  const std::size_t want = sizeof(h) + (h.has_state ? 3 * width * sizeof(float) : 0);
  if ((h.has_state && h.tokens != tokens) || bytes.size() != want) {
    return InvalidArgumentError("step cache state: for " + std::to_string(h.tokens) +
                                " tokens in " + std::to_string(bytes.size()) + " bytes, not " +
                                std::to_string(tokens) + " tokens");
  }
  c->computed = h.computed;
  c->skipped = h.skipped;
  c->anchor.clear();
  c->residual.clear();
  if (h.has_state) {
    const char* p = bytes.data() + sizeof(h);
    c->anchor.resize(width);
    c->residual.resize(2 * width);
    std::memcpy(c->anchor.data(), p, width * sizeof(float));
    std::memcpy(c->residual.data(), p + width * sizeof(float), 2 * width * sizeof(float));
  }
  return Status::Ok();
}

std::vector<float> EncodePicture(const Request& r, const std::uint8_t* rgb, int width, int height) {
  media::RgbImage in;
  in.width = width;
  in.height = height;
  in.rgb.assign(rgb, rgb + static_cast<std::size_t>(width) * height * 3);
  const media::RgbImage sized = media::ResizeRgb(in, r.width, r.height);
  // Extended to the latent cells' size by repeating the last row and column.
  const LatentShape s = r.latent();
  const int H = s.h * kSpatialDown, W = s.w * kSpatialDown;
  const std::size_t plane = static_cast<std::size_t>(H) * W;
  std::vector<float> planar(3 * plane);
  for (int y = 0; y < H; ++y) {
    const int sy = std::min(y, r.height - 1);
    for (int x = 0; x < W; ++x) {
      const std::uint8_t* px =
          sized.rgb.data() +
          (static_cast<std::size_t>(sy) * r.width + std::min(x, r.width - 1)) * 3;
      for (int c = 0; c < 3; ++c) {
        planar[c * plane + static_cast<std::size_t>(y) * W + x] =
            static_cast<float>(px[c]) / 127.5f - 1.0f;
      }
    }
  }
  std::vector<float> z(s.elements() / s.t);  // One latent frame.
  ReferenceModels().image_encoder.EncodeFrame(planar.data(), s.h, s.w, z.data());
  return z;
}

int EditStartStep(int steps, float strength) {
  const int noised = static_cast<int>(std::floor(strength * static_cast<float>(steps)));
  return std::clamp(steps - noised, 0, steps - 1);
}

std::vector<float> EditStartLatent(const Request& r, const std::vector<float>& z0, int start) {
  std::vector<float> x = InitialNoise(r);
  const LatentShape s = r.latent();
  const std::size_t plane = static_cast<std::size_t>(s.h) * s.w;
  const float sigma = 1.0f - static_cast<float>(start) / static_cast<float>(r.steps);
  // [c, t, h, w]: every latent frame starts from the picture's latent.
  for (int c = 0; c < kLatentChannels; ++c) {
    for (int t = 0; t < s.t; ++t) {
      float* dst = x.data() + (static_cast<std::size_t>(c) * s.t + t) * plane;
      const float* src = z0.data() + static_cast<std::size_t>(c) * plane;
      for (std::size_t i = 0; i < plane; ++i) {
        dst[i] = (1.0f - sigma) * src[i] + sigma * dst[i];
      }
    }
  }
  return x;
}

PreviewSchedule::PreviewSchedule(const Request& r, std::chrono::milliseconds min_interval)
    : every_(r.preview_every), steps_(r.steps), min_interval_(min_interval) {}

bool PreviewSchedule::Want(int done) {
  if (every_ <= 0 || (done % every_ != 0 && done != steps_)) {
    return false;
  }
  const auto now = std::chrono::steady_clock::now();
  if (done != steps_ && last_.has_value() && now - *last_ < min_interval_) {
    return false;
  }
  last_ = now;
  return true;
}

Result<std::string> PreviewPng(const std::vector<float>& x0, const LatentShape& s) {
  const WeightsFile& w = *ReferenceModels().weights;
  const float* map = w.Data("preview.rgb");  // [kLatentChannels, 3]
  const float* bias = w.Data("preview.rgb_b");
  const int side = std::max(s.h, s.w);
  // A pixel per latent cell (a 32×32 preview of 128×128): enlarging it
  // costs PNG time (2× a side: 5× the time, 1.6% of a 128×128 job), and a
  // client scales it up as it likes.
  const int stride = (side + kMaxPreviewSide - 1) / kMaxPreviewSide;  // >1 past 128 cells.
  const int H = (s.h + stride - 1) / stride, W = (s.w + stride - 1) / stride;
  const std::size_t plane = static_cast<std::size_t>(s.h) * s.w;
  const std::size_t channel = plane * static_cast<std::size_t>(s.t);  // Frame 0 of each channel.
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(W) * H * 3);
  for (int i = 0; i < H; ++i) {
    for (int j = 0; j < W; ++j) {
      const std::size_t cell = static_cast<std::size_t>(i * stride) * s.w + j * stride;
      std::uint8_t* px = rgb.data() + (static_cast<std::size_t>(i) * W + j) * 3;
      for (int o = 0; o < 3; ++o) {
        float v = bias[o];
        for (int c = 0; c < kLatentChannels; ++c) {
          v += x0[c * channel + cell] * map[c * 3 + o];
        }
        px[o] = static_cast<std::uint8_t>(std::clamp((v + 1.0f) * 127.5f + 0.5f, 0.0f, 255.0f));
      }
    }
  }
  return media::EncodePng(rgb.data(), W, H);
}

FrameDecoder::FrameDecoder(const Request& r) : r_(r), s_(r.latent()) {}

Status FrameDecoder::AddLatentFrame(const float* latent, int k) {
  const std::size_t plane = static_cast<std::size_t>(s_.h) * s_.w;
  std::vector<float> z(kLatentChannels * plane);
  for (int c = 0; c < kLatentChannels; ++c) {
    std::memcpy(z.data() + c * plane, latent + (static_cast<std::size_t>(c) * s_.t + k) * plane,
                plane * sizeof(float));
  }
  if (k == 0) {
    SLUICE_RETURN_IF_ERROR(Emit(z));
  } else {
    std::vector<float> mix(z.size());
    for (int sub = 1; sub <= kTemporalDown; ++sub) {
      if (static_cast<int>(pngs_.size()) >= r_.frames) {
        break;
      }
      const float a = static_cast<float>(sub) / kTemporalDown;
      for (std::size_t i = 0; i < z.size(); ++i) {
        mix[i] = (1.0f - a) * prev_[i] + a * z[i];
      }
      SLUICE_RETURN_IF_ERROR(Emit(mix));
    }
  }
  prev_ = std::move(z);
  return Status::Ok();
}

Status FrameDecoder::Emit(const std::vector<float>& z) {
  const int W = s_.w * kSpatialDown, H = s_.h * kSpatialDown;
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(W) * H * 3);
  ReferenceModels().decoder.DecodeFrame(z.data(), s_.h, s_.w, rgb.data());
  // Crop to the requested size (rows stay W pixels apart until packed).
  for (int y = 1; y < r_.height; ++y) {
    std::memmove(rgb.data() + static_cast<std::size_t>(y) * r_.width * 3,
                 rgb.data() + static_cast<std::size_t>(y) * W * 3,
                 static_cast<std::size_t>(r_.width) * 3);
  }
  SLUICE_ASSIGN_OR_RETURN(std::string png, media::EncodePng(rgb.data(), r_.width, r_.height));
  pngs_.push_back(std::move(png));
  return Status::Ok();
}

std::string FrameDecoder::Output() const {
  return r_.video ? media::WriteFramesTar(pngs_) : (pngs_.empty() ? "" : pngs_.front());
}

std::string FrameDecoder::OutputType() const {
  return r_.video ? std::string(media::kFramesArchiveType) : "image/png";
}

Result<std::pair<std::string, std::string>> GenerateAll(const Request& r, LoraTerms lora) {
  const std::vector<float> cond = EncodeCondition(r);
  std::vector<float> x = InitialNoise(r);
  for (int i = 0; i < r.steps; ++i) {
    DenoiseStep(r, cond.data(), i, x, nullptr, nullptr, nullptr, lora);
  }
  FrameDecoder dec(r);
  for (int k = 0; k < r.latent().t; ++k) {
    SLUICE_RETURN_IF_ERROR(dec.AddLatentFrame(x.data(), k));
  }
  return std::make_pair(dec.Output(), dec.OutputType());
}

}  // namespace sluice::reference
