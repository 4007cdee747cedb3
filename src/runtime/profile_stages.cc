#include "sluice/runtime/profile_stages.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/work_schedule.h"
#include "media/frames_archive.h"
#include "media/png.h"
#include "runtime/buffer_pool.h"
#include "runtime/payload_io.h"

namespace sluice {
namespace {

using Seconds = std::chrono::duration<double>;

void Spend(double seconds, double factor) {
  std::this_thread::sleep_for(Seconds(seconds * factor));
}

// How many chunks a latent of `p` goes in: along its frames (dimension 1
// of a video's [C, T, H, W]), at most one per frame.
int LatentChunks(const ModelProfile& p, int latent_chunks) {
  return p.video && p.latent_shape.size() == 4
             ? static_cast<int>(std::clamp<std::int64_t>(latent_chunks, 1, p.latent_shape[1]))
             : 1;
}

using internal::BufferPool;

// Publishes a bf16 tensor of `shape` from a buffer of `pool`, as a model
// publishes from the device buffer its output is in: the job's id in its
// first element, the rest what the buffer held (a stand-in's values carry
// nothing; its size and shape are what the hand-off moves).
// Its time is the run's "output" timing.
Result<StageOutput> Publish(DiffusionConnector& conn, BufferPool& pool, StageContext& ctx,
                            const std::string& stage, const std::vector<std::int64_t>& shape,
                            int chunks = 1) {
  const auto start = std::chrono::steady_clock::now();
  const BufferPool::Lease buf = pool.Acquire(static_cast<std::size_t>(NumElements(shape)) * 2);
  *static_cast<std::uint16_t*>(buf.data()) = static_cast<std::uint16_t>(ctx.job_id());
  Result<StageOutput> out = internal::PublishForNextStage(
      conn, ctx.job_id(), stage, stage == "encode" ? PayloadKind::kEmbedding : PayloadKind::kLatent,
      TensorView{buf.data(), DType::kBF16, shape, {}}, chunks > 1 ? 1 : -1, chunks,
      std::chrono::minutes(5), /*reused=*/true);
  ctx.AddTiming("output", std::chrono::steady_clock::now() - start);
  return out;
}

// Fetches the bf16 payload the run's input names into a new buffer
// (FetchInput), calling `on_chunk` as chunks land. Without `on_chunk` its
// time is the run's "input" timing (with it, the fetch and the work on the
// chunks overlap). Not into a reused buffer: consuming job after job into
// one address slowed a loaded deployment by a quarter (calibration_test's
// one-decode-worker case: 10.8 -> 8.6 jobs/s, every stage's report slower),
// mostly because the per-job buffer freed here is warm memory glibc hands
// to the final stage's multi-megabyte result copies, which otherwise fault
// in fresh pages (docs/benchmarks/end-to-end.md). Errors: FetchInput's.
Status Fetch(DiffusionConnector& conn, StageContext& ctx,
             const internal::ChunkFn& on_chunk = nullptr) {
  const auto start = std::chrono::steady_clock::now();
  Status s = internal::FetchInput<std::uint16_t>(conn, ctx.input(), nullptr, on_chunk).status();
  if (!on_chunk) {
    ctx.AddTiming("input", std::chrono::steady_clock::now() - start);
  }
  return s;
}

// The job's profile (its model, when that names a known profile) or
// `fallback`, and its step count ("steps" when given).
std::pair<const ModelProfile*, int> ForRequest(const ModelProfile& fallback,
                                               const StageContext& ctx) {
  const nlohmann::json req = nlohmann::json::parse(ctx.request_json(), nullptr, false);
  const ModelProfile* p = &fallback;
  for (const ModelProfile& known : ModelProfiles()) {
    if (known.name == ctx.model()) {
      p = &known;
    }
  }
  const int steps = req.is_object() && req.contains("steps") && req["steps"].is_number_integer()
                        ? req["steps"].get<int>()
                        : p->steps;
  return {p, steps};
}

// Encode through the condition cache: a stand-in embedding per text,
// computed (half the encode time each) only where no worker has it yet;
// denoise is handed the entries' keys (no payload keys: nobody removes
// them).
Result<StageOutput> EncodeCached(StageContext& ctx, const ModelProfile& p, cache::Cache& conditions,
                                 double time_factor) {
  const cache::ConditionEncoder encoder = ProfileConditionEncoder(p);
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> keys,
                          cache::ConditionKeysFor(encoder, ctx.request_json()));
  const TensorMeta meta{"bf16", p.condition_shape, {}, ""};
  const auto bytes = static_cast<std::size_t>(NumElements(p.condition_shape)) * 2;
  for (const std::string& key : keys) {
    SLUICE_RETURN_IF_ERROR(conditions.Ensure(
        key,
        [&]() -> Result<std::vector<std::byte>> {
          Spend(p.encode_s / static_cast<double>(keys.size()), time_factor);
          return std::vector<std::byte>(bytes, static_cast<std::byte>(key[0]));
        },
        meta));
  }
  StageOutput out;
  out.output = cache::EncodeCachedInput(keys);
  return out;
}

// The denoise loop: step-sized sleeps with progress, stopping on cancel.
// With `may_yield`, a checkpoint request ends it at the next step (returns
// true: preempted; the profile's state is its step, nothing is stored).
Result<bool> RunSteps(StageContext& ctx, const ModelProfile& p, int steps, double time_factor,
                      bool may_yield) {
  for (int s = ctx.resume_step(); s < steps; ++s) {
    if (ctx.ShouldStop()) {
      return Status(StatusCode::kCancelled, "stopped at step " + std::to_string(s));
    }
    Spend(p.step_s, time_factor);
    const bool yield = may_yield && ctx.ShouldCheckpoint() && s + 1 < steps;
    ctx.Progress(s + 1, steps, yield);
    if (yield) {
      return true;
    }
  }
  return false;
}

// What the decode returns: a PNG of the request's size (a frames archive
// of the request's frame count for videos) in one colour from the job id,
// padded to the profile's encoded size, so it is served (and checked) as a
// real model's output of that size would be.
Result<StageOutput> Encoded(const StageContext& ctx, const ModelProfile& p) {
  const nlohmann::json req = nlohmann::json::parse(ctx.request_json(), nullptr, false);
  int w = 64, h = 64;
  std::size_t frames = 1;
  // A video request names its frames (the HTTP front fills them in); the
  // profile's own kind is only the fallback.
  bool video = p.video;
  if (req.is_object()) {
    video = req.contains("frames");
    const std::string size = req.value("size", std::string("64x64"));
    if (std::sscanf(size.c_str(), "%dx%d", &w, &h) != 2 || w < 1 || h < 1 || w > 8192 || h > 8192) {
      return InvalidArgumentError("profile decode: bad size '" + size + "'");
    }
    if (video && req.contains("frames") && req["frames"].is_number_integer()) {
      frames = std::clamp<std::size_t>(req["frames"].get<std::size_t>(), 1, 4096);
    }
  }
  const auto shade = static_cast<std::uint8_t>(ctx.job_id());
  const std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3, shade);
  SLUICE_ASSIGN_OR_RETURN(std::string png, media::EncodePng(rgb.data(), w, h));
  StageOutput out;
  if (!video) {
    out.output = media::PadPng(std::move(png), p.encoded_bytes());
    out.type = "image/png";
    return out;
  }
  const std::vector<std::string> files(frames,
                                       media::PadPng(std::move(png), p.encoded_bytes() / frames));
  out.output = media::WriteFramesTar(files);
  out.type = std::string(media::kFramesArchiveType);
  return out;
}

// The decode: first frames out after kFirstOutputShare of its time.
Result<StageOutput> RunDecode(StageContext& ctx, const ModelProfile& p, double time_factor) {
  Spend(p.decode_s * kFirstOutputShare, time_factor);
  ctx.FirstOutput();
  Spend(p.decode_s * (1 - kFirstOutputShare), time_factor);
  return Encoded(ctx, p);
}

// A decode fed chunk by chunk along the latent's frames: each chunk's
// share of the decode spent as it lands (after the previous chunk's), the
// first output after the first chunk.
Result<StageOutput> RunChunkedDecode(StageContext& ctx, DiffusionConnector& conn,
                                     const ModelProfile& p, double time_factor) {
  const double frames = static_cast<double>(p.latent_shape[1]);
  internal::WorkSchedule work;
  bool first = true;
  SLUICE_RETURN_IF_ERROR(Fetch(conn, ctx, [&](const ChunkView& c) {
    if (ctx.ShouldStop()) {
      return Status(StatusCode::kCancelled, "stopped while decoding");
    }
    work.Work(std::chrono::duration_cast<internal::WorkSchedule::Clock::duration>(
        Seconds(p.decode_s * time_factor * static_cast<double>(c.length) / frames)));
    if (first) {
      ctx.FirstOutput();
      first = false;
    }
    work.Asking();
    return Status::Ok();
  }));
  return Encoded(ctx, p);
}

}  // namespace

std::chrono::milliseconds ProfileLease(const ModelProfile& p, std::string_view stage,
                                       double time_factor) {
  const double unit_s = stage == "encode" ? p.encode_s : stage == "decode" ? p.decode_s : p.step_s;
  const double lease_s = std::max(30.0, 10 * unit_s * time_factor);
  return std::chrono::milliseconds(static_cast<std::int64_t>(lease_s * 1000));
}

cache::ConditionEncoder ProfileConditionEncoder(const ModelProfile& p) {
  return {"sluice-profile-text",
          "1",
          {{"profile", p.name}, {"shape", p.condition_shape}, {"dtype", std::string("bf16")}},
          {"prompt", "negative_prompt"}};
}

StageHandler ProfileStageHandler(const ModelProfile& profile, const std::string& stage,
                                 DiffusionConnector* connector, double time_factor,
                                 int latent_chunks, ProfileCaches caches) {
  // Payload buffers reused job after job (registrations kept; forgotten
  // when the last copy of the handler goes).
  std::shared_ptr<BufferPool> pool =
      BufferPool::Create([connector](const void* data) { connector->Forget(data); });
  return [profile, stage, connector, time_factor, latent_chunks, caches,
          pool](StageContext& ctx) -> Result<StageOutput> {
    const auto [p, steps] = ForRequest(profile, ctx);
    if (stage == "encode") {
      if (caches.conditions != nullptr) {
        return EncodeCached(ctx, *p, *caches.conditions, time_factor);
      }
      Spend(p->encode_s, time_factor);
      return Publish(*connector, *pool, ctx, stage, p->condition_shape);
    }
    if (stage == "denoise") {
      if (cache::IsCachedInput(ctx.input())) {
        // Read as a denoise would (into its device), each the profile's condition.
        SLUICE_RETURN_IF_ERROR(
            internal::ReadCachedInput(ctx.input(), caches.store,
                                      static_cast<std::size_t>(NumElements(p->condition_shape)) * 2,
                                      0, [](std::size_t, const std::vector<std::byte>&) {}));
      } else {
        SLUICE_RETURN_IF_ERROR(Fetch(*connector, ctx));
      }
      SLUICE_ASSIGN_OR_RETURN(const bool preempted,
                              RunSteps(ctx, *p, steps, time_factor, /*may_yield=*/true));
      if (preempted) {
        StageOutput out;
        out.preempted = true;
        return out;
      }
      return Publish(*connector, *pool, ctx, stage, p->latent_shape,
                     LatentChunks(*p, latent_chunks));
    }
    // Chunked as the denoise handed it over (its worker's latent_chunks).
    SLUICE_ASSIGN_OR_RETURN(const PayloadDescriptor d, PayloadDescriptor::Decode(ctx.input()));
    if (p->video && d.num_chunks > 1 && d.chunk_dim == 1) {
      return RunChunkedDecode(ctx, *connector, *p, time_factor);
    }
    SLUICE_RETURN_IF_ERROR(Fetch(*connector, ctx));
    return RunDecode(ctx, *p, time_factor);
  };
}

StageHandler ProfileColocatedHandler(const ModelProfile& profile, double time_factor) {
  return [profile, time_factor](StageContext& ctx) -> Result<StageOutput> {
    const auto [p, steps] = ForRequest(profile, ctx);
    Spend(p->encode_s, time_factor);
    SLUICE_RETURN_IF_ERROR(RunSteps(ctx, *p, steps, time_factor, /*may_yield=*/false).status());
    return RunDecode(ctx, *p, time_factor);
  };
}

}  // namespace sluice
