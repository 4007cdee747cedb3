// The device backend conformance suite over the cuda backend (label gpu).
// Where no GPU is present, or the build has no CUDA, every case skips and
// says why.
#include "device/cuda_backend.h"

#include "device/testing/backend_conformance.h"

namespace sluice::device::testing {

INSTANTIATE_TEST_SUITE_P(Cuda, BackendConformanceTest, ::testing::Values("cuda"));

}  // namespace sluice::device::testing
