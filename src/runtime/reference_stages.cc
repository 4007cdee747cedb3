#include "sluice/runtime/reference_stages.h"

#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "sluice/adapters.h"

#include "common/log.h"
#include "runtime/adapter_cache.h"
#include "runtime/payload_io.h"
#include "runtime/reference/pipeline.h"
#include "runtime/step_batcher.h"

namespace sluice {
namespace {

using reference::FrameDecoder;
using reference::Request;

// The step cache's threshold a request runs with: its own, else the
// deployment's (0: off).
float StepCacheThreshold(const Request& r, const ReferenceStageOptions& o) {
  return r.step_cache.value_or(o.step_cache_threshold);
}

// The condition-cache key of an edit's encoded picture: its pixels at the
// request's size, through this model's VAE encoder.
std::string PictureKey(const Request& r) {
  const Request::Edit& p = *r.edit;
  const std::vector<cache::Field> params = {{"width", std::int64_t{p.width}},
                                            {"height", std::int64_t{p.height}},
                                            {"out_width", std::int64_t{r.width}},
                                            {"out_height", std::int64_t{r.height}}};
  return *cache::ConditionKey(
      "sluice-reference-vae", reference::ReferenceModels().identity,
      std::string_view(reinterpret_cast<const char*>(p.rgb.data()), p.rgb.size()), params);
}

// The sampler a request's checkpoints name: a step-cached run's states
// differ from an uncached one's (the threshold is named), an edit's are
// its picture's and strength's, an adapted one's its adapters' (digest
// and scale). Computed once per run (an edit's hashes
// its picture).
std::string SamplerName(const Request& r, const ReferenceStageOptions& o) {
  auto number = [](float v) {
    char t[32];
    std::snprintf(t, sizeof(t), "%.9g", static_cast<double>(v));
    return std::string(t);
  };
  std::string sampler = "flow_euler_cfg";
  if (const float t = StepCacheThreshold(r, o); t > 0) {
    sampler += "+step_cache=" + number(t);
  }
  if (r.edit) {
    sampler += "+edit=" + PictureKey(r) + "+strength=" + number(r.edit->strength);
  }
  for (const Request::Lora& a : r.lora) {
    sampler += "+lora=" + a.digest + "*" + number(a.scale);
  }
  return sampler;
}

// The standard checkpoint key's parts for the reference DiT's sampler
// state after `step` (guidance as the model reads it: a float, widened),
// under `sampler` (SamplerName).
cache::CheckpointKeyParts ReferenceCheckpointParts(const Request& r,
                                                   const std::vector<std::string>& cond_keys,
                                                   int step, const std::string& sampler) {
  const reference::LatentShape s = r.latent();
  cache::CheckpointKeyParts p;
  p.model = std::string(kReferenceModelName);
  p.model_version = reference::ReferenceModels().identity;
  p.sampler = sampler;
  p.seed = r.seed;
  p.guidance = static_cast<double>(r.guidance);
  p.condition_keys = cond_keys;
  p.total_steps = r.steps;
  p.step = step;
  p.shape = {reference::kLatentChannels, s.t, s.h, s.w};
  p.dtype = "f32";
  return p;
}

struct SamplerRun {
  bool preempted = false;
  bool resumed = false;  // Assigned with a resume step (another run wrote checkpoints).
  // The request's checkpoint key of each step (standard keys, so any
  // denoise worker, C++ or Python, finds another's).
  std::function<std::string(int step)> key;
  // Its checkpoints stay (keep_checkpoints; or it resumed an earlier job's
  // kept ones under the same keys): nothing is removed, the ttl ends them.
  bool keep = false;
  bool every_step = false;  // keep_checkpoints: a checkpoint of every step.
  std::chrono::seconds ttl{0};
  // Resumed from another job's kept checkpoint: that key and step, and
  // whether this run's conditions or guidance differ from that job's (its
  // states then differ from what its own keys name: it writes none).
  std::string from_key;
  int from_step = 0;
  bool edited = false;
  // Checkpoints this run wrote (step, key), oldest first. One is removed
  // once the orchestrator has heard of a later one: until then a lost job
  // resumes from it, however many newer ones this run wrote since.
  std::deque<std::pair<int, std::string>> checkpoints;
  bool step_cached = false;  // The step cache is on: its state goes beside each checkpoint.
};

// Where the step cache's state after a checkpoint's step is kept: a
// feature key naming the checkpoint (cache class "feature", evictable; a
// run that finds none starts the cache empty).
std::string StepCacheStateKey(const std::string& checkpoint_key) {
  const std::vector<cache::Field> parts = {{"checkpoint", checkpoint_key},
                                           {"part", std::string("step_cache")}};
  return *cache::FeatureKey("sluice.reference.dit", parts);
}

// Removes a checkpoint and the step cache's state beside it.
void RemoveCheckpoint(const ReferenceStageOptions& o, const SamplerRun& run,
                      const std::string& key) {
  (void)o.store->Remove(key);
  if (run.step_cached) {
    (void)o.store->Remove(StepCacheStateKey(key));
  }
}

// Removes the job's checkpoints once they are of no use (done, cancelled).
// After a resume, every step's key is removed: a run that died may have
// written later ones. Removal is best effort; checkpoints expire anyway.
void RemoveCheckpoints(const ReferenceStageOptions& o, const Request& r, SamplerRun& run) {
  if (o.store == nullptr || run.keep) {
    return;
  }
  for (const auto& [step, key] : run.checkpoints) {
    RemoveCheckpoint(o, run, key);
  }
  run.checkpoints.clear();
  if (run.resumed && !run.keep) {
    for (int step = 1; step < r.steps; ++step) {
      RemoveCheckpoint(o, run, run.key(step));
    }
  }
}

// Stores the step cache's state beside checkpoint `key` (best effort: a
// resumed run without it starts the cache empty).
void SaveStepCache(StageContext& ctx, const ReferenceStageOptions& o, const reference::StepCache& c,
                   const std::string& key) {
  const std::string state = reference::SerializeStepCache(c);
  PutOptions po;
  po.policy = LeasePolicy::Cache();
  po.policy.cache_class = "feature";
  const Status s = o.store->Put(
      StepCacheStateKey(key),
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(state.data()), state.size()),
      po);
  if (!s.ok() && s.code() != StatusCode::kAlreadyExists) {
    SLUICE_LOG(warn, "job {}: step cache state beside {} not stored: {}", ctx.job_id(), key,
               s.ToString());
  }
}

// Restores the step cache's state kept beside checkpoint `key`; logs and
// leaves it empty when there is none or it does not fit.
void LoadStepCache(StageContext& ctx, const ReferenceStageOptions& o, const Request& r,
                   const std::string& key, reference::StepCache& c) {
  Result<std::vector<std::byte>> got = o.store->Get(StepCacheStateKey(key));
  Status s = got.status();
  if (got.ok()) {
    s = reference::RestoreStepCache(
        std::string_view(reinterpret_cast<const char*>(got->data()), got->size()),
        r.latent().tokens(), &c);
  }
  if (!s.ok()) {
    SLUICE_LOG(info, "job {}: step cache starts empty ({})", ctx.job_id(), s.ToString());
  }
}

// The negative condition's cross-attention keys and values, through the
// feature cache (shared by every request with that negative prompt);
// computed here when the cache fails.
std::vector<float> NegativeCrossKv(StageContext& ctx, cache::Cache& features,
                                   const std::string& negative_key,
                                   const std::vector<float>& cond) {
  const float* negative = cond.data() + std::size_t{reference::kTextLen} * reference::kTextDim;
  auto compute = [negative] { return reference::ReferenceModels().denoiser.CrossKv(negative); };
  const std::vector<cache::Field> parts = {{"model", std::string(kReferenceModelName)},
                                           {"model_version", reference::ReferenceModels().identity},
                                           {"negative", negative_key},
                                           {"part", std::string("cross_kv")}};
  Result<std::string> key = cache::FeatureKey("sluice.reference.dit", parts);
  constexpr std::size_t kBytes = reference::Denoiser::kCrossKvFloats * sizeof(float);
  Result<std::vector<std::byte>> got = key.status();
  if (key.ok()) {
    got = features.GetOrCompute(*key, [&]() -> Result<std::vector<std::byte>> {
      const std::vector<float> kv = compute();
      const auto* p = reinterpret_cast<const std::byte*>(kv.data());
      return std::vector<std::byte>(p, p + kBytes);
    });
  }
  if (!got.ok() || got->size() != kBytes) {
    SLUICE_LOG(warn, "job {}: shared negative keys unavailable ({}); computing them here",
               ctx.job_id(), got.ok() ? "wrong size" : got.status().ToString());
    return compute();
  }
  std::vector<float> kv(reference::Denoiser::kCrossKvFloats);
  std::memcpy(kv.data(), got->data(), kBytes);
  return kv;
}

// An edit's encoded picture: the condition cache's entry (an encode stage
// with the cache put it there), else computed here.
std::vector<float> EditLatent(StageContext& ctx, const Request& r, const ReferenceStageOptions& o) {
  const reference::LatentShape s = r.latent();
  const std::size_t floats = s.elements() / s.t;
  if (o.store != nullptr) {
    Result<std::vector<std::byte>> got = o.store->Get(PictureKey(r));
    if (got.ok() && got->size() == floats * sizeof(float)) {
      std::vector<float> z(floats);
      std::memcpy(z.data(), got->data(), got->size());
      return z;
    }
    SLUICE_LOG(debug, "job {}: encoded picture not cached ({}); encoding it here", ctx.job_id(),
               got.ok() ? "wrong size" : got.status().ToString());
  }
  return reference::EncodePicture(r, r.edit->rgb.data(), r.edit->width, r.edit->height);
}

// What the request asks of checkpoints: keep_checkpoints (every step, for
// keep_checkpoints_s) and resume_checkpoint (an earlier job's request and
// kept step, put there by the orchestrator for resume_from). Errors:
// kInvalidArgument (a malformed resume_checkpoint, or an earlier request
// whose seed, steps or latent shape differ from this one's).
Status ReadCheckpointing(const std::string& request_json, const Request& r,
                         const std::vector<std::string>& cond_keys, const ReferenceStageOptions& o,
                         SamplerRun& run) {
  const nlohmann::json j = nlohmann::json::parse(request_json, nullptr, false);
  if (!j.is_object()) {
    return InvalidArgumentError("request: not a JSON object");
  }
  if (j.value("keep_checkpoints", false)) {
    run.keep = true;
    run.every_step = true;
    const auto s = j.value("keep_checkpoints_s", std::int64_t{0});
    if (s > 0) {
      run.ttl = std::chrono::seconds(s);
    }
  }
  auto rc = j.find("resume_checkpoint");
  if (rc == j.end()) {
    return Status::Ok();
  }
  if (!rc->is_object() || !rc->contains("request") || !(*rc)["request"].is_object() ||
      !rc->contains("step") || !(*rc)["step"].is_number_integer()) {
    return InvalidArgumentError("resume_checkpoint: want {\"request\": {...}, \"step\": k}");
  }
  const std::string earlier = (*rc)["request"].dump();
  run.from_step = (*rc)["step"].get<int>();
  SLUICE_ASSIGN_OR_RETURN(Request r0,
                          reference::ParseRequest(earlier, o.default_steps, o.default_guidance));
  if (r.edit || r0.edit) {
    return InvalidArgumentError("resume_from: not with image edits");
  }
  const reference::LatentShape a = r0.latent(), b = r.latent();
  if (r0.seed != r.seed || r0.steps != r.steps || a.t != b.t || a.h != b.h || a.w != b.w) {
    return InvalidArgumentError("resume_from: the seed, steps and size must be the earlier job's");
  }
  if (run.from_step < 1 || run.from_step >= r.steps) {
    return InvalidArgumentError("resume_from.step: must be in 1.." + std::to_string(r.steps - 1));
  }
  SLUICE_ASSIGN_OR_RETURN(run.from_key, ReferenceCheckpointKey(earlier, run.from_step, o));
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> earlier_keys,
                          cache::ConditionKeysFor(ReferenceConditionEncoder(), earlier));
  run.edited = earlier_keys != cond_keys || r0.guidance != r.guidance ||
               StepCacheThreshold(r0, o) != StepCacheThreshold(r, o) ||
               SamplerName(r0, o) != SamplerName(r, o);  // Adapters, say.
  // Unedited, its states are the earlier job's under the same keys: they
  // are that job's to keep, never this run's to remove.
  run.keep = run.keep || !run.edited;
  return Status::Ok();
}

// What a handler's jobs share: the adapters resident on the worker, and
// (with ReferenceStageOptions::denoise_batch > 1) the batcher their steps
// go through. Lives as long as the handler.
struct Shared {
  explicit Shared(const ReferenceStageOptions& o) : adapters(o.store, o.adapter_cache_bytes) {
    if (o.denoise_batch > 1) {
      internal::StepBatcher::Options b;
      b.max_batch = o.denoise_batch;
      batcher = std::make_unique<internal::StepBatcher>(b);
    }
  }
  internal::AdapterCache adapters;
  std::unique_ptr<internal::StepBatcher> batcher;
};

// A request's adapters, resolved through the worker's adapter cache: held
// (`held`) for the run, with the terms the sampler takes; the job counts
// "adapter_loads", those read from the store (0: all were resident).
// Errors: a request entry without a digest (kInvalidArgument), the cache's.
Status ResolveAdapters(StageContext& ctx, const Request& r, internal::AdapterCache* cache,
                       std::vector<std::shared_ptr<const reference::Adapter>>& held,
                       std::vector<reference::LoraTerm>& terms) {
  int loads = 0;
  for (std::size_t i = 0; i < r.lora.size(); ++i) {
    const Request::Lora& a = r.lora[i];
    if (a.digest.empty()) {
      return InvalidArgumentError("lora[" + std::to_string(i) +
                                  "]: no digest (the orchestrator names each adapter's file)");
    }
    if (cache == nullptr) {
      return FailedPreconditionError("lora: this stage serves no adapters");
    }
    bool loaded = false;
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<const reference::Adapter> adapter,
                            cache->Get(a.digest, a.name, &loaded));
    loads += loaded ? 1 : 0;
    terms.push_back({adapter.get(), a.scale});
    held.push_back(std::move(adapter));
  }
  if (!r.lora.empty()) {
    ctx.AddCount("adapter_loads", loads);
    // What the worker holds now (loading may have dropped others): the
    // orchestrator draws the adapters' jobs here, and no longer for those
    // it dropped.
    std::vector<std::string> labels;
    for (const std::string& digest : cache->Resident()) {
      labels.push_back(std::string(kAdapterLabelPrefix) + digest);
    }
    ctx.SetHeld(std::move(labels));
  }
  return Status::Ok();
}

// Runs the sampler over x from the job's resume step (when its checkpoint
// is found; else from the seed's noise), reporting progress, writing
// checkpoints every k steps and (with `may_yield`) when asked to yield,
// and stopping at a step boundary on cancel.
Result<SamplerRun> RunSampler(StageContext& ctx, const Request& r, const std::vector<float>& cond,
                              std::vector<float>& x, const ReferenceStageOptions& o, Shared& shared,
                              bool may_yield) {
  SamplerRun run;
  std::vector<std::shared_ptr<const reference::Adapter>> held;
  std::vector<reference::LoraTerm> lora;
  SLUICE_RETURN_IF_ERROR(ResolveAdapters(ctx, r, &shared.adapters, held, lora));
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> cond_keys,
                          cache::ConditionKeysFor(ReferenceConditionEncoder(), ctx.request_json()));
  std::vector<float> negative_kv;  // CFG sharing: the negative branch's keys and values.
  if (o.feature_cache != nullptr) {
    negative_kv = NegativeCrossKv(ctx, *o.feature_cache, cond_keys[1], cond);
  }
  reference::StepCache step_cache;
  step_cache.threshold = StepCacheThreshold(r, o);
  run.step_cached = step_cache.threshold > 0;
  run.key = [&r, cond_keys, sampler = SamplerName(r, o)](int step) {
    return *cache::CheckpointKey(ReferenceCheckpointParts(r, cond_keys, step, sampler));
  };
  run.resumed = ctx.resume_step() > 0;
  run.ttl = std::chrono::duration_cast<std::chrono::seconds>(o.checkpoint_ttl);
  SLUICE_RETURN_IF_ERROR(ReadCheckpointing(ctx.request_json(), r, cond_keys, o, run));
  int start = 0;
  if (ctx.resume_step() > 0 && ctx.resume_step() < r.steps && o.store != nullptr) {
    const std::string key = run.key(ctx.resume_step());
    Result<std::vector<std::byte>> saved = o.store->Get(key);
    if (saved.ok() && saved->size() == x.size() * sizeof(float)) {
      std::memcpy(x.data(), saved->data(), saved->size());
      start = ctx.resume_step();
      SLUICE_LOG(info, "job {}: resuming denoise from the checkpoint of step {}", ctx.job_id(),
                 start);
      if (run.step_cached) {
        LoadStepCache(ctx, o, r, key, step_cache);
      }
    } else {
      SLUICE_LOG(warn, "job {}: checkpoint of step {} unavailable ({}); starting over",
                 ctx.job_id(), ctx.resume_step(),
                 saved.ok() ? "wrong size" : saved.status().ToString());
    }
  }
  if (start == 0 && run.from_step > 0) {
    if (o.store == nullptr) {
      return FailedPreconditionError("resume_from needs a store client (--master)");
    }
    Result<std::vector<std::byte>> kept = o.store->Get(run.from_key);
    if (!kept.ok() || kept->size() != x.size() * sizeof(float)) {
      return NotFoundError("resume_from: the checkpoint of step " + std::to_string(run.from_step) +
                           " is gone (" + (kept.ok() ? "wrong size" : kept.status().ToString()) +
                           ")");
    }
    std::memcpy(x.data(), kept->data(), kept->size());
    start = run.from_step;
    // Unedited, the earlier job's cache state is this one's (edited, its
    // residuals are of other conditions: the cache starts empty).
    if (run.step_cached && !run.edited) {
      LoadStepCache(ctx, o, r, run.from_key, step_cache);
    }
    SLUICE_LOG(info, "job {}: denoise resumes another job's step {}{}", ctx.job_id(), start,
               run.edited ? " under changed conditions" : "");
  }
  if (start == 0 && r.edit) {
    // An edit starts at its strength's step from its picture, noised.
    start = reference::EditStartStep(r.steps, r.edit->strength);
    x = reference::EditStartLatent(r, EditLatent(ctx, r, o), start);
  } else if (start == 0) {
    x = reference::InitialNoise(r);
  }
  std::vector<float> x0;  // The step's prediction, when it makes a preview.
  reference::PreviewSchedule previews(r);
  // Batching: a member of the worker's batch from its first step to its
  // last (or its stop), counting the steps it shared with other jobs.
  std::optional<internal::StepBatcher::Member> member;
  if (shared.batcher != nullptr && !(o.interactive_alone && ctx.interactive())) {
    member.emplace(shared.batcher.get(), r.latent());
  }
  int batched = 0;
  for (int step = start; step < r.steps; ++step) {
    if (ctx.ShouldStop()) {
      RemoveCheckpoints(o, r, run);
      return Status(StatusCode::kCancelled, "stopped at step " + std::to_string(step));
    }
    const int done = step + 1;
    const bool preview = previews.Want(done);
    const reference::SampleStep item{&r,
                                     cond.data(),
                                     step,
                                     &x,
                                     negative_kv.empty() ? nullptr : negative_kv.data(),
                                     preview ? &x0 : nullptr,
                                     &step_cache,
                                     lora};
    if (member.has_value()) {
      batched += shared.batcher->Step(item) > 1 ? 1 : 0;
    } else {
      reference::DenoiseStep(r, item.cond, step, x, item.negative_kv, item.x0, &step_cache, lora);
    }
    if (preview) {
      if (Result<std::string> png = reference::PreviewPng(x0, r.latent()); png.ok()) {
        ctx.Preview(done, std::move(*png));
      }
    }
    const bool yield = may_yield && ctx.ShouldCheckpoint() && done < r.steps;
    const int every = run.every_step ? 1 : o.checkpoint_every;
    const bool periodic = every > 0 && done % every == 0 && done < r.steps;
    bool saved = false;
    if (o.store != nullptr && (yield || periodic) && !run.edited) {
      const std::string key = run.key(done);
      PutOptions po;
      po.policy = LeasePolicy::Ttl(run.ttl);
      Status s =
          o.store->Put(key,
                       std::span<const std::byte>(reinterpret_cast<const std::byte*>(x.data()),
                                                  x.size() * sizeof(float)),
                       po);
      // Already there: an earlier run wrote the same step (same bytes).
      saved = s.ok() || s.code() == StatusCode::kAlreadyExists;
      if (saved && run.step_cached) {
        SaveStepCache(ctx, o, step_cache, key);
      }
      if (saved && !run.keep) {
        run.checkpoints.emplace_back(done, key);
        const int reported = ctx.ReportedCheckpoint();
        while (run.checkpoints.size() > 1 && run.checkpoints.front().first < reported) {
          RemoveCheckpoint(o, run, run.checkpoints.front().second);
          run.checkpoints.pop_front();
        }
      } else if (!saved) {
        SLUICE_LOG(warn, "job {}: checkpoint of step {} not stored: {}", ctx.job_id(), done,
                   s.ToString());
      }
    }
    ctx.Progress(done, r.steps, saved);
    if (yield && saved) {
      run.preempted = true;
      break;
    }
  }
  // What this run sampled, and of it what the step cache skipped and what
  // ran in a batch with other jobs.
  ctx.AddCount("steps", step_cache.computed + step_cache.skipped);
  if (shared.batcher != nullptr) {
    ctx.AddCount("steps_batched", batched);  // 0 for a job that stepped alone.
  }
  if (step_cache.threshold > 0) {
    ctx.AddCount("steps_skipped", step_cache.skipped);
  }
  return run;
}

Result<Request> Parse(const StageContext& ctx, const ReferenceStageOptions& o) {
  return reference::ParseRequest(ctx.request_json(), o.default_steps, o.default_guidance);
}

std::vector<std::int64_t> ConditionShape() {
  return {2, reference::kTextLen, reference::kTextDim};
}

std::vector<std::int64_t> LatentDims(const reference::LatentShape& s) {
  return {reference::kLatentChannels, s.t, s.h, s.w};
}

constexpr std::size_t kTextBytes = std::size_t{reference::kTextLen} * reference::kTextDim * 4;

// Encode through the condition cache: each text's embedding is computed
// only if no worker has it yet; denoise gets the entries' keys.
Result<StageOutput> EncodeCached(StageContext& ctx, const Request& r,
                                 const ReferenceStageOptions& o) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> keys,
                          cache::ConditionKeysFor(ReferenceConditionEncoder(), ctx.request_json()));
  const std::string* texts[2] = {&r.prompt, &r.negative_prompt};
  const TensorMeta meta{"f32", {reference::kTextLen, reference::kTextDim}, {}, ""};
  for (std::size_t i = 0; i < keys.size(); ++i) {
    SLUICE_RETURN_IF_ERROR(o.condition_cache->Ensure(
        keys[i],
        [&]() -> Result<std::vector<std::byte>> {
          const std::vector<float> e = reference::EncodeText(*texts[i]);
          const auto* p = reinterpret_cast<const std::byte*>(e.data());
          return std::vector<std::byte>(p, p + e.size() * sizeof(float));
        },
        meta));
  }
  if (r.edit) {
    // The picture's latent goes to the cache beside the texts' embeddings;
    // denoise reads it there (or encodes the picture itself without it).
    const reference::LatentShape s = r.latent();
    const TensorMeta picture{"f32", {reference::kLatentChannels, s.h, s.w}, {}, ""};
    SLUICE_RETURN_IF_ERROR(o.condition_cache->Ensure(
        PictureKey(r),
        [&]() -> Result<std::vector<std::byte>> {
          const std::vector<float> z =
              reference::EncodePicture(r, r.edit->rgb.data(), r.edit->width, r.edit->height);
          const auto* p = reinterpret_cast<const std::byte*>(z.data());
          return std::vector<std::byte>(p, p + z.size() * sizeof(float));
        },
        picture));
  }
  StageOutput out;
  out.output = cache::EncodeCachedInput(keys);  // No payload keys: nobody removes entries.
  return out;
}

// The condition [2, 64, 64] from a cached input's two entries.
Result<std::vector<float>> ReadCachedCondition(const std::string& input,
                                               const ReferenceStageOptions& o) {
  std::vector<float> cond(2 * kTextBytes / sizeof(float));
  SLUICE_RETURN_IF_ERROR(internal::ReadCachedInput(
      input, o.store, kTextBytes, 2, [&](std::size_t i, const std::vector<std::byte>& v) {
        std::memcpy(cond.data() + i * kTextBytes / sizeof(float), v.data(), kTextBytes);
      }));
  return cond;
}

Result<StageOutput> Encode(StageContext& ctx, DiffusionConnector& conn,
                           const ReferenceStageOptions& o, Shared&) {
  SLUICE_ASSIGN_OR_RETURN(Request r, Parse(ctx, o));
  if (o.condition_cache != nullptr) {
    return EncodeCached(ctx, r, o);
  }
  std::vector<float> cond = reference::EncodeCondition(r);
  return internal::PublishForNextStage(conn, ctx.job_id(), "encode", PayloadKind::kEmbedding,
                                       TensorView{cond.data(), DType::kF32, ConditionShape(), {}});
}

Result<StageOutput> Denoise(StageContext& ctx, DiffusionConnector& conn,
                            const ReferenceStageOptions& o, Shared& shared) {
  SLUICE_ASSIGN_OR_RETURN(Request r, Parse(ctx, o));
  std::vector<float> cond;
  if (cache::IsCachedInput(ctx.input())) {
    SLUICE_ASSIGN_OR_RETURN(cond, ReadCachedCondition(ctx.input(), o));
  } else {
    PayloadDescriptor d;
    SLUICE_ASSIGN_OR_RETURN(cond, internal::FetchInput<float>(conn, ctx.input(), &d));
    if (d.shape != ConditionShape()) {
      return InvalidArgumentError("input: the condition must be f32 [2, 64, 64]");
    }
  }
  const reference::LatentShape s = r.latent();
  std::vector<float> x(s.elements());
  SLUICE_ASSIGN_OR_RETURN(SamplerRun run,
                          RunSampler(ctx, r, cond, x, o, shared, /*may_yield=*/true));
  if (run.preempted) {
    StageOutput out;
    out.preempted = true;
    return out;
  }
  // Video latents go out one latent frame per chunk: decode starts on the
  // first frame while the rest are in flight.
  Result<StageOutput> out = internal::PublishForNextStage(
      conn, ctx.job_id(), "denoise", PayloadKind::kLatent,
      TensorView{x.data(), DType::kF32, LatentDims(s), {}}, s.t > 1 ? 1 : -1, s.t > 1 ? s.t : 1);
  if (out.ok()) {
    RemoveCheckpoints(o, r, run);
  }
  return out;
}

Result<StageOutput> Decode(StageContext& ctx, DiffusionConnector& conn,
                           const ReferenceStageOptions& o, Shared&) {
  SLUICE_ASSIGN_OR_RETURN(Request r, Parse(ctx, o));
  SLUICE_ASSIGN_OR_RETURN(PayloadDescriptor d, PayloadDescriptor::Decode(ctx.input()));
  const reference::LatentShape s = r.latent();
  if (d.dtype != DType::kF32 || d.shape != LatentDims(s)) {
    return InvalidArgumentError("input: the latent must be f32 [" +
                                std::to_string(reference::kLatentChannels) + ", " +
                                std::to_string(s.t) + ", " + std::to_string(s.h) + ", " +
                                std::to_string(s.w) + "] for this request");
  }
  std::vector<float> latent(s.elements());
  FrameDecoder dec(r);
  SLUICE_RETURN_IF_ERROR(internal::FetchInto(conn, d, latent.data(), [&](const ChunkView& c) {
    const std::int64_t first = d.num_chunks > 1 ? c.start : 0;
    const std::int64_t count = d.num_chunks > 1 ? c.length : s.t;
    for (std::int64_t k = first; k < first + count; ++k) {
      if (ctx.ShouldStop()) {
        return Status(StatusCode::kCancelled, "stopped while decoding");
      }
      SLUICE_RETURN_IF_ERROR(dec.AddLatentFrame(latent.data(), static_cast<int>(k)));
      if (k == 0) {
        ctx.FirstOutput();
      }
    }
    return Status::Ok();
  }));
  StageOutput out;
  out.output = dec.Output();
  out.type = dec.OutputType();
  return out;
}

}  // namespace

Result<std::string> ReferenceCheckpointKey(std::string_view request_json, int step,
                                           const ReferenceStageOptions& o) {
  SLUICE_ASSIGN_OR_RETURN(
      Request r, reference::ParseRequest(request_json, o.default_steps, o.default_guidance));
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> cond_keys,
                          cache::ConditionKeysFor(ReferenceConditionEncoder(), request_json));
  return cache::CheckpointKey(ReferenceCheckpointParts(r, cond_keys, step, SamplerName(r, o)));
}

Status LoadReferenceWeights(const std::string& weights) {
  return reference::LoadReferenceModels(weights.empty() ? reference::DefaultReferenceWeights()
                                                        : weights);
}

cache::ConditionEncoder ReferenceConditionEncoder() {
  return {"sluice-reference-text",
          reference::ReferenceModels().identity,
          {{"max_length", std::int64_t{reference::kTextLen}},
           {"dim", std::int64_t{reference::kTextDim}},
           {"dtype", std::string("f32")}},
          {"prompt", "negative_prompt"}};
}

namespace {

Status Validate(const ReferenceStageOptions& o) {
  if (o.default_steps < 1 || o.default_steps > 1000) {
    return InvalidArgumentError("default_steps: must be in 1..1000");
  }
  if (!(o.default_guidance >= 0 && o.default_guidance <= 30)) {
    return InvalidArgumentError("default_guidance: must be in 0..30");
  }
  if (o.checkpoint_every < 0) {
    return InvalidArgumentError("checkpoint_every: must be >= 0");
  }
  if (!(o.step_cache_threshold >= 0 &&
        o.step_cache_threshold <= reference::StepCache::kMaxThreshold)) {
    return InvalidArgumentError("step_cache_threshold: must be in 0..1 (0: off)");
  }
  if (o.denoise_batch < 1 || o.denoise_batch > 64) {
    return InvalidArgumentError("denoise_batch: must be in 1..64 (1: every job alone)");
  }
  if (o.checkpoint_every > 0 && o.store == nullptr) {
    return InvalidArgumentError("checkpoint_every: checkpoints need a store");
  }
  return Status::Ok();
}

}  // namespace

Result<StageHandler> ReferenceStageHandler(const std::string& stage, DiffusionConnector* connector,
                                           const ReferenceStageOptions& options) {
  SLUICE_RETURN_IF_ERROR(Validate(options));
  if (connector == nullptr) {
    return InvalidArgumentError("connector: required");
  }
  using Fn = Result<StageOutput> (*)(StageContext&, DiffusionConnector&,
                                     const ReferenceStageOptions&, Shared&);
  Fn fn = stage == "encode"    ? &Encode
          : stage == "denoise" ? &Denoise
          : stage == "decode"  ? &Decode
                               : nullptr;
  if (fn == nullptr) {
    return InvalidArgumentError("stage: '" + stage + "' is not encode, denoise or decode");
  }
  // Denoise's adapters and batcher, shared by the handler's jobs.
  auto shared = std::make_shared<Shared>(options);
  return StageHandler([fn, connector, options, shared](StageContext& ctx) {
    return fn(ctx, *connector, options, *shared);
  });
}

Result<AdapterFacts> CheckReferenceAdapter(std::string bytes) {
  SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<const reference::Adapter> a,
                          reference::Adapter::Parse(std::move(bytes)));
  return AdapterFacts{a->digest(), a->rank(), a->bytes()};
}

Result<StageHandler> ReferenceColocatedHandler(const ReferenceStageOptions& options) {
  SLUICE_RETURN_IF_ERROR(Validate(options));
  auto shared = std::make_shared<Shared>(options);
  return StageHandler([options, shared](StageContext& ctx) -> Result<StageOutput> {
    SLUICE_ASSIGN_OR_RETURN(Request r, Parse(ctx, options));
    const std::vector<float> cond = reference::EncodeCondition(r);
    std::vector<float> x(r.latent().elements());
    SLUICE_ASSIGN_OR_RETURN(SamplerRun run,
                            RunSampler(ctx, r, cond, x, options, *shared, /*may_yield=*/false));
    StageOutput out;
    if (run.preempted) {
      out.preempted = true;
      return out;
    }
    FrameDecoder dec(r);
    for (int k = 0; k < r.latent().t; ++k) {
      if (ctx.ShouldStop()) {
        RemoveCheckpoints(options, r, run);
        return Status(StatusCode::kCancelled, "stopped while decoding");
      }
      SLUICE_RETURN_IF_ERROR(dec.AddLatentFrame(x.data(), k));
      if (k == 0) {
        ctx.FirstOutput();
      }
    }
    RemoveCheckpoints(options, r, run);
    out.output = dec.Output();
    out.type = dec.OutputType();
    return out;
  });
}

}  // namespace sluice
