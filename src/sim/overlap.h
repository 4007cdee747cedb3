// Benchmark (b), Denoise -> Decode overlap, in the simulator at real
// sizes: one video job alone on a cluster of one GPU per stage (exact
// stage times), its latent handed to decode whole and then chunked along
// T, so decode starts on the first slice while the rest crosses the link.
// What chunking hides is measured as the difference of the two runs'
// latencies.
#ifndef SLUICE_SIM_OVERLAP_H_
#define SLUICE_SIM_OVERLAP_H_

#include <string>

#include "sluice/status.h"

#include "sim/simulator.h"

namespace sluice::sim {

struct OverlapResult {
  std::string model;
  double link_gbps = 0;
  int chunks = 1;
  double latent_bytes = 0;
  double transfer_s = 0;         // The latent over the link, whole.
  double decode_s = 0;           // The decode's own time.
  double sequential_s = 0;       // Hand-off to decode's end: transfer, then decode.
  double pipelined_s = 0;        // Chunked: decode from the first slice.
  double hidden_s = 0;           // sequential - pipelined.
  double transfer_hidden = 0;    // hidden / transfer: the share of the transfer under decode.
  double decode_overlapped = 0;  // hidden / decode: the share of decode run beside the transfer.
};

// `m` (three stages; its decode's input is the denoise output) over a
// link of `link_gbps` with `link_latency_us`, its latent in `chunks`
// slices. Errors: kInvalidArgument (not three stages, chunks < 1, a link
// not > 0).
Result<OverlapResult> MeasureOverlap(const ModelProfile& m, double link_gbps, int chunks,
                                     double link_latency_us = 10);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_OVERLAP_H_
