#include "bench/batch_forward_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <tuple>

#include "runtime/reference/adapter.h"
#include "runtime/reference/ops.h"
#include "runtime/reference/pipeline.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace ref = sluice::reference;

constexpr const char* kPrompts[] = {
    "a large red circle on the left on a blue background", "a small green square at the top",
    "a yellow triangle on the right", "a large blue diamond in the centre on a white background"};

struct Jobs {
  std::vector<ref::Request> r;
  std::vector<std::vector<float>> cond, x;
};

Result<Jobs> MakeJobs(int n, const std::string& size) {
  Jobs j;
  for (int k = 0; k < n; ++k) {
    const std::string body = std::string(R"({"prompt":")") + kPrompts[k % 4] + R"(","size":")" +
                             size + R"(","seed":)" + std::to_string(k) + R"(,"steps":1000})";
    SLUICE_ASSIGN_OR_RETURN(ref::Request r, ref::ParseRequest(body, 1000, 4.0f));
    j.cond.push_back(ref::EncodeCondition(r));
    j.x.push_back(ref::InitialNoise(r));
    j.r.push_back(std::move(r));
  }
  return j;
}

// One step of every job (the same step index), batched or not; seconds.
// `lora` (optional): each job's adapters; `groups` > 0: the jobs go as
// that many batches, job k in batch k mod groups (grouped by adapter).
double Sweep(Jobs& j, int step, bool batched, const std::vector<ref::LoraTerm>* lora = nullptr,
             int groups = 0) {
  std::vector<std::vector<ref::SampleStep>> batches(std::max(groups, 1));
  for (std::size_t k = 0; k < j.r.size(); ++k) {
    ref::LoraTerms terms;
    if (lora != nullptr) {
      terms = ref::LoraTerms(&(*lora)[k], 1);
    }
    batches[groups > 0 ? k % groups : 0].push_back(
        {&j.r[k], j.cond[k].data(), step, &j.x[k], nullptr, nullptr, nullptr, terms});
  }
  const Clock::time_point t0 = Clock::now();
  for (auto& items : batches) {
    ref::DenoiseSteps(items, batched);
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A random adapter of `rank` on every block layer (a safetensors file in
// memory, through Adapter::Parse as a registered one goes).
Result<std::shared_ptr<const ref::Adapter>> RandomAdapter(int rank, std::uint64_t seed) {
  nlohmann::json header;
  header["__metadata__"] = {{"format", std::string(ref::kAdapterFormat)},
                            {"version", std::string(ref::kAdapterVersion)},
                            {"base", std::string(ref::kAdapterBase)},
                            {"rank", std::to_string(rank)}};
  std::vector<float> values;
  ref::Rng rng(seed);
  for (const ref::TensorSpec& t : ref::ReferenceArchitecture()) {
    for (int l = 0; l < ref::kAdaptedLayers; ++l) {
      const std::string layer =
          std::string(ref::AdaptedLayerName(static_cast<ref::AdaptedLayer>(l)));
      if (!t.name.starts_with("dit.blocks.") || !t.name.ends_with("." + layer)) {
        continue;
      }
      for (const auto& [part, rows, cols] :
           {std::tuple{".lora_a", t.shape[0], std::int64_t{rank}},
            std::tuple{".lora_b", std::int64_t{rank}, t.shape[1]}}) {
        const std::size_t begin = values.size() * 4;
        const std::vector<float> v = rng.Fill(static_cast<std::size_t>(rows * cols), 0.01f);
        values.insert(values.end(), v.begin(), v.end());
        header[t.name + part] = {{"dtype", "F32"},
                                 {"shape", {rows, cols}},
                                 {"data_offsets", {begin, values.size() * 4}}};
      }
    }
  }
  const std::string text = header.dump();
  std::string bytes(8, '\0');
  const std::uint64_t len = text.size();
  std::memcpy(bytes.data(), &len, 8);
  bytes += text;
  bytes.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  return ref::Adapter::Parse(std::move(bytes));
}

}  // namespace

Result<BatchForwardBenchResult> RunBatchForwardBench(const BatchForwardBenchOptions& o) {
  if (o.batch_sizes.empty() || o.batch_sizes.size() > 8) {
    return InvalidArgumentError("batch sizes: 1 to 8 of them");
  }
  for (int b : o.batch_sizes) {
    if (b < 1 || b > 64) {
      return InvalidArgumentError("batch sizes: each in 1..64, got " + std::to_string(b));
    }
  }
  if (o.rounds < 1 || o.rounds > 1000) {
    return InvalidArgumentError("rounds: 1..1000");
  }
  if (o.adapters < 0 || o.adapters > 16) {
    return InvalidArgumentError("adapters: 0..16");
  }
  if (o.rank < 1 || o.rank > ref::kMaxAdapterRank) {
    return InvalidArgumentError("rank: 1.." + std::to_string(ref::kMaxAdapterRank));
  }
  std::vector<std::shared_ptr<const ref::Adapter>> adapters;
  for (int a = 0; a < o.adapters; ++a) {
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<const ref::Adapter> one,
                            RandomAdapter(o.rank, 0x5eed + static_cast<std::uint64_t>(a)));
    adapters.push_back(std::move(one));
  }
  BatchForwardBenchResult out;
  out.options = o;
  for (int b : o.batch_sizes) {
    SLUICE_ASSIGN_OR_RETURN(Jobs batched, MakeJobs(b, o.size));
    SLUICE_ASSIGN_OR_RETURN(Jobs alone, MakeJobs(b, o.size));
    Sweep(batched, 0, true);  // Warm-up: buffers, caches.
    Sweep(alone, 0, false);
    double tb = 0, tu = 0;
    for (int round = 1; round <= o.rounds; ++round) {
      if (round % 2 == 0) {
        tb += Sweep(batched, round, true);
        tu += Sweep(alone, round, false);
      } else {
        tu += Sweep(alone, round, false);
        tb += Sweep(batched, round, true);
      }
    }
    BatchForwardFigures f;
    f.batch = b;
    const double steps = static_cast<double>(b) * o.rounds;
    f.batched_steps_per_s = steps / tb;
    f.unbatched_steps_per_s = steps / tu;
    f.throughput_ratio = f.batched_steps_per_s / f.unbatched_steps_per_s;
    for (int k = 0; k < b; ++k) {
      for (std::size_t i = 0; i < batched.x[k].size(); ++i) {
        f.max_latent_diff = std::max(
            f.max_latent_diff, static_cast<double>(std::fabs(batched.x[k][i] - alone.x[k][i])));
      }
    }
    if (!adapters.empty()) {
      // The batch with adapters, mixed and grouped, against the same batch
      // without them (batched), each step of the same jobs in turn.
      std::vector<ref::LoraTerm> lora;
      for (int k = 0; k < b; ++k) {
        lora.push_back({adapters[k % adapters.size()].get(), 1.0f});
      }
      const int groups = std::min<int>(b, static_cast<int>(adapters.size()));
      SLUICE_ASSIGN_OR_RETURN(Jobs mixed, MakeJobs(b, o.size));
      SLUICE_ASSIGN_OR_RETURN(Jobs grouped, MakeJobs(b, o.size));
      SLUICE_ASSIGN_OR_RETURN(Jobs plain, MakeJobs(b, o.size));
      Sweep(mixed, 0, true, &lora);
      Sweep(grouped, 0, true, &lora, groups);
      double tm = 0, tg = 0, tp = 0;
      for (int round = 1; round <= o.rounds; ++round) {
        const bool flip = round % 2 == 0;
        tm += Sweep(mixed, round, true, &lora);
        if (flip) {
          tp += Sweep(plain, round, true);
          tg += Sweep(grouped, round, true, &lora, groups);
        } else {
          tg += Sweep(grouped, round, true, &lora, groups);
          tp += Sweep(plain, round, true);
        }
      }
      f.mixed_steps_per_s = steps / tm;
      f.grouped_steps_per_s = steps / tg;
      f.mixed_over_plain = f.mixed_steps_per_s / (steps / tp);
      f.grouped_over_plain = f.grouped_steps_per_s / (steps / tp);
      f.mixed_over_grouped = f.mixed_steps_per_s / f.grouped_steps_per_s;
    }
    out.sizes.push_back(f);
  }
  return out;
}

std::string ToJson(const BatchForwardBenchResult& r) {
  nlohmann::json sizes = nlohmann::json::array();
  for (const BatchForwardFigures& f : r.sizes) {
    nlohmann::json one = {{"batch", f.batch},
                          {"batched_steps_per_s", f.batched_steps_per_s},
                          {"unbatched_steps_per_s", f.unbatched_steps_per_s},
                          {"throughput_ratio", f.throughput_ratio},
                          {"max_latent_diff", f.max_latent_diff}};
    if (r.options.adapters > 0) {
      one["mixed_steps_per_s"] = f.mixed_steps_per_s;
      one["grouped_steps_per_s"] = f.grouped_steps_per_s;
      one["mixed_over_plain"] = f.mixed_over_plain;
      one["grouped_over_plain"] = f.grouped_over_plain;
      one["mixed_over_grouped"] = f.mixed_over_grouped;
    }
    sizes.push_back(std::move(one));
  }
  nlohmann::json out = {{"rounds", r.options.rounds}, {"size", r.options.size}, {"sizes", sizes}};
  if (r.options.adapters > 0) {
    out["adapters"] = r.options.adapters;
    out["rank"] = r.options.rank;
  }
  return out.dump();
}

}  // namespace sluice::bench
