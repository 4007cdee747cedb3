// A target process for multi-process tests: registers one region (shared
// or plain memory) filled with a known pattern, prints
// "READY <endpoint> <key>" and serves until stdin closes.
// Usage: transfer_peer <shared|plain> <bytes> [secret]
#include <unistd.h>

#include <iostream>
#include <string>

#include "sluice/transfer/engine.h"

#include "transfer/testing/engine_pair.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: transfer_peer <shared|plain> <bytes> [secret]\n";
    return 2;
  }
  const std::string mode = argv[1];
  const std::size_t size = std::stoull(argv[2]);
  sluice::EngineConfig config;
  if (argc > 3) {
    config.secret = argv[3];
  }
  auto engine = sluice::TransferEngine::Create(config);
  if (!engine.ok()) {
    std::cerr << engine.status().ToString() << "\n";
    return 1;
  }
  sluice::testing::TestBuffer buf = mode == "shared"
                                        ? sluice::testing::TestBuffer::Shared(**engine, size)
                                        : sluice::testing::TestBuffer::Anonymous(size);
  buf.Fill(77);
  auto key = (*engine)->RegisterMemory(buf.data(), size, sluice::MemoryKind::kHost,
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
