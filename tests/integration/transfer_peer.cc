// A target process for multi-process tests: registers one region (shared
// or plain host memory, or sim device memory on device 1; "ucx": plain
// host memory with ucx run beside tcp and shm) filled with a known
// pattern, prints "READY <endpoint> <key>" and serves until stdin closes.
// Usage: transfer_peer <shared|plain|ucx|device> <bytes> [secret]
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>

#include "sluice/transfer/engine.h"

#include "device/backends.h"
#include "transfer/testing/engine_pair.h"

namespace {

// `size` bytes of sim device memory on device 1 holding pattern 77.
void* DevicePattern(std::size_t size) {
  auto b = sluice::device::ProcessBackend("sim");
  if (!b.ok()) {
    return nullptr;
  }
  sluice::device::DeviceBackend& backend = **b;
  auto dev = backend.Allocate(1, size);
  auto stream = backend.CreateStream(1);
  auto event = backend.CreateEvent();
  if (!dev.ok() || !stream.ok() || !event.ok()) {
    return nullptr;
  }
  sluice::testing::TestBuffer host = sluice::testing::TestBuffer::Anonymous(size);
  host.Fill(77);
  if (!backend.CopyAsync(*dev, host.data(), size, *stream).ok() ||
      !backend.Record(*event, *stream).ok() ||
      !backend.Wait(*event, std::chrono::seconds(10)).ok()) {
    return nullptr;
  }
  return *dev;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: transfer_peer <shared|plain|ucx|device> <bytes> [secret]\n";
    return 2;
  }
  const std::string mode = argv[1];
  const std::size_t size = std::stoull(argv[2]);
  sluice::EngineConfig config;
  if (mode == "device") {
    config.device = "sim";
  }
  if (mode == "ucx") {
    config.transports = {"tcp", "shm", "ucx"};
  }
  if (argc > 3) {
    config.secret = argv[3];
  }
  auto engine = sluice::TransferEngine::Create(config);
  if (!engine.ok()) {
    std::cerr << engine.status().ToString() << "\n";
    return 1;
  }
  sluice::testing::TestBuffer buf;
  void* memory = nullptr;
  if (mode == "device") {
    memory = DevicePattern(size);
    if (memory == nullptr) {
      std::cerr << "no sim device memory\n";
      return 1;
    }
  } else {
    buf = mode == "shared" ? sluice::testing::TestBuffer::Shared(**engine, size)
                           : sluice::testing::TestBuffer::Anonymous(size);
    buf.Fill(77);
    memory = buf.data();
  }
  auto key = (*engine)->RegisterMemory(
      memory, size, mode == "device" ? sluice::MemoryKind::kDevice : sluice::MemoryKind::kHost,
      sluice::Access::kRemoteReadWrite);
  if (!key.ok()) {
    std::cerr << key.status().ToString() << "\n";
    return 1;
  }
  std::cout << "READY " << (*engine)->endpoint() << " " << key->value << std::endl;
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  return 0;
}
