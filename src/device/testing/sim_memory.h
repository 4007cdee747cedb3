// For tests: sim device memory of the process's "sim" backend, freed with
// the object, and synchronous copies to fill and check it (the only way
// the CPU may reach it). Failures are gtest failures.
#ifndef SLUICE_DEVICE_TESTING_SIM_MEMORY_H_
#define SLUICE_DEVICE_TESTING_SIM_MEMORY_H_

#include <chrono>
#include <cstddef>
#include <vector>

#include <gtest/gtest.h>

#include "device/backends.h"

namespace sluice::testing {

class SimMemory {
 public:
  SimMemory() {
    auto b = device::ProcessBackend("sim");
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    backend_ = *b;
    stream_ = *backend_->CreateStream(0);
    event_ = *backend_->CreateEvent();
  }
  ~SimMemory() {
    for (void* p : allocs_) {
      EXPECT_TRUE(backend_->Free(p).ok());
    }
    (void)backend_->DestroyEvent(event_);
    (void)backend_->DestroyStream(stream_);
  }
  SimMemory(const SimMemory&) = delete;
  SimMemory& operator=(const SimMemory&) = delete;

  // `len` bytes on sim device `device`, freed by the destructor.
  char* Allocate(int device, std::size_t len) {
    Result<void*> p = backend_->Allocate(device, len);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    allocs_.push_back(*p);
    return static_cast<char*>(*p);
  }
  // Copies between any host and sim device memory; returns when done.
  void Copy(void* dst, const void* src, std::size_t len) {
    ASSERT_TRUE(backend_->CopyAsync(dst, src, len, stream_).ok());
    ASSERT_TRUE(backend_->Record(event_, stream_).ok());
    ASSERT_TRUE(backend_->Wait(event_, std::chrono::seconds(5)).ok());
  }
  // The `len` bytes at `src` (device or host memory) as a host vector.
  std::vector<char> Read(const void* src, std::size_t len) {
    std::vector<char> out(len);
    Copy(out.data(), src, len);
    return out;
  }

 private:
  device::DeviceBackend* backend_ = nullptr;
  device::Stream stream_;
  device::Event event_;
  std::vector<void*> allocs_;
};

}  // namespace sluice::testing

#endif  // SLUICE_DEVICE_TESTING_SIM_MEMORY_H_
