// The device backend conformance suite: what every DeviceBackend must do,
// run over each backend by name (sim_backend_test: "sim";
// cuda_backend_test: "cuda", skipped where no GPU is present).
#ifndef SLUICE_DEVICE_TESTING_BACKEND_CONFORMANCE_H_
#define SLUICE_DEVICE_TESTING_BACKEND_CONFORMANCE_H_

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "device/backend.h"

namespace sluice::device::testing {

// The backend a conformance run uses: "sim" with 2 devices of 64 MiB, or
// "cuda". Errors: the backend's own (a skip, for an absent GPU).
Result<std::unique_ptr<DeviceBackend>> MakeTestBackend(const std::string& name);

// Parameter: the backend's name.
class BackendConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override;

  // Queues a copy and waits for it.
  void CopySync(void* dst, const void* src, std::size_t len);
  // A second device where there is one, else device 0.
  int OtherDevice() const { return backend_->DeviceCount() > 1 ? 1 : 0; }

  std::unique_ptr<DeviceBackend> backend_;
  Stream stream_;
  Event event_;
};

}  // namespace sluice::device::testing

#endif  // SLUICE_DEVICE_TESTING_BACKEND_CONFORMANCE_H_
