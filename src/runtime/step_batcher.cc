#include "runtime/step_batcher.h"

#include <vector>

namespace sluice::internal {

StepBatcher::StepBatcher(Options o)
    : batcher_(
          [](std::span<const reference::SampleStep* const> items) {
            std::vector<reference::SampleStep> batch;
            batch.reserve(items.size());
            for (const reference::SampleStep* i : items) {
              batch.push_back(*i);
            }
            // A lone step runs unbatched: DenoiseStep's bits.
            reference::DenoiseSteps(batch, /*batched=*/items.size() > 1);
            return Status::Ok();
          },
          o) {}

int StepBatcher::Step(const reference::SampleStep& item) {
  // DenoiseSteps cannot fail: the batch size is all there is to report.
  Result<int> n = batcher_.Step(Key(item.r->latent()), item);
  return n.ok() ? *n : 1;
}

}  // namespace sluice::internal
