#include "bench/batch_forward_bench.h"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

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
double Sweep(Jobs& j, int step, bool batched) {
  std::vector<ref::SampleStep> items;
  for (std::size_t k = 0; k < j.r.size(); ++k) {
    items.push_back({&j.r[k], j.cond[k].data(), step, &j.x[k], nullptr, nullptr, nullptr, {}});
  }
  const Clock::time_point t0 = Clock::now();
  ref::DenoiseSteps(items, batched);
  return std::chrono::duration<double>(Clock::now() - t0).count();
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
    out.sizes.push_back(f);
  }
  return out;
}

std::string ToJson(const BatchForwardBenchResult& r) {
  nlohmann::json sizes = nlohmann::json::array();
  for (const BatchForwardFigures& f : r.sizes) {
    sizes.push_back({{"batch", f.batch},
                     {"batched_steps_per_s", f.batched_steps_per_s},
                     {"unbatched_steps_per_s", f.unbatched_steps_per_s},
                     {"throughput_ratio", f.throughput_ratio},
                     {"max_latent_diff", f.max_latent_diff}});
  }
  return nlohmann::json{{"rounds", r.options.rounds}, {"size", r.options.size}, {"sizes", sizes}}
      .dump();
}

}  // namespace sluice::bench
