// The sim device backend: the backend conformance suite
// (testing/backend_conformance.cc), and what only the sim does -- a
// bounded capacity per device, a CPU touch of its memory that faults.
#include "device/sim_backend.h"

#include <gtest/gtest.h>

#include "device/backends.h"
#include "device/testing/backend_conformance.h"

namespace sluice::device {
namespace {

using testing::BackendConformanceTest;
INSTANTIATE_TEST_SUITE_P(Sim, BackendConformanceTest, ::testing::Values("sim"));

class SimBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = MakeSimBackend(SimOptions{2, std::size_t{64} << 20});
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::move(*b);
  }
  std::unique_ptr<DeviceBackend> backend_;
};

TEST_F(SimBackendTest, CapacityAndOptionsAreChecked) {
  Result<void*> big = backend_->Allocate(0, std::size_t{65} << 20);
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted) << big.status().ToString();
  EXPECT_EQ(MakeSimBackend(SimOptions{0}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SimBackendTest, FreedMemoryGoesBackToTheDevicesCapacity) {
  for (int i = 0; i < 4; ++i) {
    Result<void*> dev = backend_->Allocate(0, std::size_t{40} << 20);
    ASSERT_TRUE(dev.ok()) << "round " << i << ": " << dev.status().ToString();
    ASSERT_TRUE(backend_->Free(*dev).ok());
  }
}

using SimBackendDeathTest = SimBackendTest;

TEST_F(SimBackendDeathTest, ACpuTouchOfDeviceMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Result<void*> dev = backend_->Allocate(0, 4096);
  ASSERT_TRUE(dev.ok());
  volatile char* p = static_cast<volatile char*>(*dev);
  EXPECT_DEATH({ p[10] = 1; }, "");
  EXPECT_DEATH({ [[maybe_unused]] char c = p[0]; }, "");
  EXPECT_TRUE(backend_->Free(*dev).ok());
}

TEST(DeviceBackendsTest, BackendsAreMadeByNameAndAnUnknownNameIsNamed) {
  auto sim = MakeDeviceBackend("sim");
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  EXPECT_EQ((*sim)->name(), "sim");
  auto bad = MakeDeviceBackend("tpu");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"tpu\""), std::string_view::npos);
}

}  // namespace
}  // namespace sluice::device
