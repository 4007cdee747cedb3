#include "sluice/runtime/profile_stages.h"

#include <nlohmann/json.hpp>
#include <thread>

namespace sluice {
namespace {

using Seconds = std::chrono::duration<double>;

// Figures from WORKLOADS.md §3.1–3.4 (H100 where given).
const std::vector<ModelProfile> kProfiles = {
    {"wan2.1-480p",
     50,
     0.89,
     5.06,
     2.40,
     {512, 4096},
     {16, 21, 60, 104},
     81ull * 480 * 832 * 3,
     true},
    {"wan2.1-720p",
     50,
     0.89,
     5.76,
     2.40,
     {512, 4096},
     {16, 21, 90, 160},
     81ull * 720 * 1280 * 3,
     true},
    {"hunyuan-720p",
     50,
     0.30,
     38.1,
     2.40,
     {256, 4096},
     {16, 33, 90, 160},
     129ull * 720 * 1280 * 3,
     true},
    {"flux-1024", 28, 0.052, 0.139, 0.31, {512, 4096}, {16, 128, 128}, 1024ull * 1024 * 3, false},
    {"qwen-image-1024",
     50,
     0.26,
     0.248,
     0.31,
     {512, 3584},
     {16, 1, 128, 128},
     1024ull * 1024 * 3,
     false},
};

void Spend(double seconds, double factor) {
  std::this_thread::sleep_for(Seconds(seconds * factor));
}

std::uint64_t Elements(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    n *= static_cast<std::uint64_t>(d);
  }
  return n;
}

// Publishes `bytes` as a bf16 tensor of `shape`, waits until it is stored,
// and returns the stage output (payload pinned: the orchestrator removes it).
Result<StageOutput> Publish(DiffusionConnector& conn, std::uint64_t job, const std::string& stage,
                            std::vector<std::uint16_t>& data,
                            const std::vector<std::int64_t>& shape) {
  StagePayload p;
  p.request_id = "job-" + std::to_string(job) + "-" + stage;
  p.kind = stage == "encode" ? PayloadKind::kEmbedding : PayloadKind::kLatent;
  p.tensor = TensorView{data.data(), DType::kBF16, shape, {}};
  p.lease = Lease{Lease::Kind::kPinned, {}};
  SLUICE_ASSIGN_OR_RETURN(auto h, conn.Publish(p));
  SLUICE_RETURN_IF_ERROR(h->Wait(std::chrono::minutes(5)));
  conn.Forget(data.data());
  StageOutput out;
  out.output = h->descriptor().Encode();
  if (h->descriptor().mode == TransferMode::kStore) {
    for (int i = 0; i < h->descriptor().num_chunks; ++i) {
      out.payload_keys.push_back(h->descriptor().key_prefix + "/" + std::to_string(i));
    }
  }
  return out;
}

Result<std::vector<std::uint16_t>> Fetch(DiffusionConnector& conn, const std::string& input) {
  SLUICE_ASSIGN_OR_RETURN(PayloadDescriptor d, PayloadDescriptor::Decode(input));
  std::vector<std::uint16_t> v(Elements(d.shape));
  {
    SLUICE_ASSIGN_OR_RETURN(auto s, conn.Consume(d, TensorView{v.data(), d.dtype, d.shape, {}}));
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(auto c, s->Next());
      if (!c.has_value()) {
        break;
      }
    }
  }
  conn.Forget(v.data());
  SLUICE_RETURN_IF_ERROR(conn.Release(d));
  return v;
}

}  // namespace

const std::vector<ModelProfile>& ModelProfiles() {
  return kProfiles;
}

Result<ModelProfile> FindModelProfile(std::string_view name) {
  std::string known;
  for (const ModelProfile& p : kProfiles) {
    if (p.name == name) {
      return p;
    }
    known += (known.empty() ? "" : ", ") + p.name;
  }
  return InvalidArgumentError("unknown profile '" + std::string(name) + "' (known: " + known + ")");
}

StageHandler ProfileStageHandler(const ModelProfile& profile, const std::string& stage,
                                 DiffusionConnector* connector, double time_factor) {
  return [profile, stage, connector, time_factor](StageContext& ctx) -> Result<StageOutput> {
    if (stage == "encode") {
      Spend(profile.encode_s, time_factor);
      std::vector<std::uint16_t> cond(Elements(profile.condition_shape),
                                      static_cast<std::uint16_t>(ctx.job_id()));
      return Publish(*connector, ctx.job_id(), stage, cond, profile.condition_shape);
    }
    if (stage == "denoise") {
      SLUICE_RETURN_IF_ERROR(Fetch(*connector, ctx.input()).status());
      const nlohmann::json req = nlohmann::json::parse(ctx.request_json(), nullptr, false);
      const int steps = req.is_object() ? req.value("steps", profile.steps) : profile.steps;
      for (int s = ctx.resume_step(); s < steps; ++s) {
        if (ctx.ShouldStop()) {
          return Status(StatusCode::kCancelled, "stopped at step " + std::to_string(s));
        }
        Spend(profile.step_s, time_factor);
        ctx.Progress(s + 1, steps, false);
      }
      std::vector<std::uint16_t> latent(Elements(profile.latent_shape),
                                        static_cast<std::uint16_t>(ctx.job_id() * 3));
      return Publish(*connector, ctx.job_id(), stage, latent, profile.latent_shape);
    }
    SLUICE_RETURN_IF_ERROR(Fetch(*connector, ctx.input()).status());
    Spend(profile.decode_s * 0.1, time_factor);
    ctx.FirstOutput();  // First frame out after a tenth of the decode.
    Spend(profile.decode_s * 0.9, time_factor);
    StageOutput out;
    out.output.assign(profile.output_bytes, static_cast<char>(ctx.job_id()));
    out.type = "application/octet-stream";
    return out;
  };
}

}  // namespace sluice
