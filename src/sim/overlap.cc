#include "sim/overlap.h"

namespace sluice::sim {
namespace {

// One job's latency on one GPU per stage.
Result<double> Alone(ModelProfile m, double link_gbps, double latency_us) {
  SimConfig c;
  for (StageProfile& s : m.stages) {
    s.service.cv = 0;
    c.pools.push_back({m.name, s.name, 1, 1, {}});
  }
  c.models = {m};
  c.duration_s = 1;
  c.link_gbps = link_gbps;
  c.link_latency_us = latency_us;
  c.trace = {{0, m.name, orchestrator::PriorityClass::kStandard, true}};
  c.keep_samples = true;
  SLUICE_ASSIGN_OR_RETURN(SimResult r, Simulate(c));
  if (r.classes.empty() || r.classes.front().latency_samples.size() != 1) {
    return InternalError("overlap: the job did not finish");
  }
  return r.classes.front().latency_samples.front();
}

}  // namespace

Result<OverlapResult> MeasureOverlap(const ModelProfile& m, double link_gbps, int chunks,
                                     double link_latency_us) {
  if (m.stages.size() != 3 || chunks < 1 || !(link_gbps > 0) || link_latency_us < 0) {
    return InvalidArgumentError(
        "overlap: a three-stage model, chunks >= 1 and a link of > 0 Gbit/s");
  }
  OverlapResult o;
  o.model = m.name;
  o.link_gbps = link_gbps;
  o.chunks = chunks;
  o.latent_bytes = static_cast<double>(m.stages[1].output_bytes);
  o.transfer_s = o.latent_bytes * 8 / (link_gbps * 1e9);
  o.decode_s = m.stages[2].service.mean_s;
  ModelProfile whole = m;
  whole.stages[2].input_chunks = 1;
  ModelProfile chunked = m;
  chunked.stages[2].input_chunks = chunks;
  SLUICE_ASSIGN_OR_RETURN(const double a, Alone(whole, link_gbps, link_latency_us));
  SLUICE_ASSIGN_OR_RETURN(const double b, Alone(chunked, link_gbps, link_latency_us));
  o.sequential_s = o.transfer_s + o.decode_s;
  o.hidden_s = a - b;
  o.pipelined_s = o.sequential_s - o.hidden_s;
  o.transfer_hidden = o.transfer_s > 0 ? o.hidden_s / o.transfer_s : 0;
  o.decode_overlapped = o.decode_s > 0 ? o.hidden_s / o.decode_s : 0;
  return o;
}

}  // namespace sluice::sim
