#include "bench/batching_bench.h"

#include <nlohmann/json.hpp>

namespace sluice::bench {

Result<BatchingBenchResult> RunBatchingBench(const BatchingBenchOptions& o) {
  if (o.batch < 2 || o.batch > 64) {
    return InvalidArgumentError("--batch: 2..64");
  }
  if (!(o.load > 0 && o.load <= 1)) {
    return InvalidArgumentError("--load: in (0, 1]");
  }
  if (!(o.saturation_rate > 0 && o.saturation_rate <= 1000)) {
    return InvalidArgumentError("--saturation-rate: in (0, 1000]");
  }
  auto run = [&](double rate, int batch) {
    E2eBenchOptions e;
    e.workload = "reference";
    e.workers = o.workers;
    e.rate = rate;
    e.duration_s = o.duration_s;
    e.warmup_s = o.warmup_s;
    e.denoise_batch = batch;
    return RunE2eBench(e);
  };
  BatchingBenchResult out;
  out.options = o;
  SLUICE_ASSIGN_OR_RETURN(out.saturated_plain, run(o.saturation_rate, 1));
  SLUICE_ASSIGN_OR_RETURN(out.saturated_batched, run(o.saturation_rate, o.batch));
  if (!(out.saturated_plain.throughput > 0) || !(out.saturated_batched.throughput > 0)) {
    return InternalError("a saturation run served nothing");
  }
  out.throughput_ratio = out.saturated_batched.throughput / out.saturated_plain.throughput;
  const double rate = o.load * out.saturated_plain.throughput;
  SLUICE_ASSIGN_OR_RETURN(out.loaded_plain, run(rate, 1));
  SLUICE_ASSIGN_OR_RETURN(out.loaded_batched, run(rate, o.batch));
  if (out.loaded_plain.interactive_jobs == 0 || !(out.loaded_plain.interactive_p99_ttff_s > 0)) {
    return InternalError("the loaded run measured no interactive job");
  }
  out.interactive_p99_ttff_ratio =
      out.loaded_batched.interactive_p99_ttff_s / out.loaded_plain.interactive_p99_ttff_s;
  return out;
}

std::string ToJson(const BatchingBenchResult& r) {
  auto brief = [](const E2eBenchResult& e) {
    return nlohmann::json{{"rate", e.options.rate},
                          {"succeeded", e.succeeded},
                          {"failed", e.failed},
                          {"throughput", e.throughput},
                          {"p99_latency_s", e.p99_latency_s},
                          {"interactive_jobs", e.interactive_jobs},
                          {"interactive_p99_ttff_s", e.interactive_p99_ttff_s}};
  };
  return nlohmann::json{{"workers", r.options.workers},
                        {"batch", r.options.batch},
                        {"load", r.options.load},
                        {"duration_s", r.options.duration_s},
                        {"saturated_plain", brief(r.saturated_plain)},
                        {"saturated_batched", brief(r.saturated_batched)},
                        {"loaded_plain", brief(r.loaded_plain)},
                        {"loaded_batched", brief(r.loaded_batched)},
                        {"throughput_ratio", r.throughput_ratio},
                        {"interactive_p99_ttff_ratio", r.interactive_p99_ttff_ratio}}
      .dump();
}

}  // namespace sluice::bench
