// A producer process for the connector tests. Publishes --count payloads of
// --shape (u16), byte i of payload k being PatternByte(k + 1, i), prints
// "READY <hex descriptor> ..." and runs until stdin closes.
//   --progressive: chunks are marked ready one by one, --chunk-ms apart;
//                  payload --slow (if >= 0) takes --slow-ms per chunk.
//   store mode without --progressive: READY once every put has landed.
//   --shared-tensors: tensors come from DiffusionConnector::AllocateTensor.
//   --device sim: tensors are sim device memory (device 0), filled through
//                 the backend's copies; the connector's engine gets "sim".
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <thread>

#include "sluice/connector/connector.h"

#include "device/backends.h"
#include "transfer/testing/engine_pair.h"

namespace {

// `len` bytes of sim device 0 memory holding `host`'s bytes (kept for the
// process's life).
sluice::Result<char*> SimCopyOf(const std::vector<char>& host) {
  SLUICE_ASSIGN_OR_RETURN(sluice::device::DeviceBackend * b, sluice::device::ProcessBackend("sim"));
  SLUICE_ASSIGN_OR_RETURN(void* p, b->Allocate(0, host.size()));
  SLUICE_ASSIGN_OR_RETURN(sluice::device::Stream s, b->CreateStream(0));
  SLUICE_ASSIGN_OR_RETURN(sluice::device::Event e, b->CreateEvent());
  SLUICE_RETURN_IF_ERROR(b->CopyAsync(p, host.data(), host.size(), s));
  SLUICE_RETURN_IF_ERROR(b->Record(e, s));
  SLUICE_RETURN_IF_ERROR(b->Wait(e, std::chrono::seconds(10)));
  return static_cast<char*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sluice;
  CLI::App app("connector test producer");
  std::string master, mode = "p2p", shape_text = "2,4,16,24,32", device;
  int dim = -1, chunks = 1, count = 1, slow = -1, chunk_ms = 0, slow_ms = 0;
  bool progressive = false, shared_tensors = false;
  app.add_option("--master", master);
  app.add_option("--mode", mode);
  app.add_option("--shape", shape_text);
  app.add_option("--dim", dim);
  app.add_option("--chunks", chunks);
  app.add_option("--count", count);
  app.add_option("--slow", slow);
  app.add_option("--chunk-ms", chunk_ms);
  app.add_option("--slow-ms", slow_ms);
  app.add_flag("--progressive", progressive);
  app.add_flag("--shared-tensors", shared_tensors);
  app.add_option("--device", device);
  CLI11_PARSE(app, argc, argv);

  std::vector<std::int64_t> shape;
  for (std::size_t at = 0; at < shape_text.size();) {
    const std::size_t comma = std::min(shape_text.find(',', at), shape_text.size());
    shape.push_back(std::stoll(shape_text.substr(at, comma - at)));
    at = comma + 1;
  }
  ConnectorConfig c;
  c.role = "denoise";
  c.store.master = master;
  c.mode = *ParseTransferMode(mode);
  c.engine.device = device;
  auto conn = DiffusionConnector::Create(c);
  if (!conn.ok()) {
    std::cout << "ERROR " << conn.status().ToString() << std::endl;
    return 1;
  }
  const TensorView proto{nullptr, DType::kBF16, shape, {}};
  std::vector<std::vector<char>> tensors(static_cast<std::size_t>(count));
  std::vector<SharedTensor> shared(static_cast<std::size_t>(count));
  std::vector<std::unique_ptr<StageHandle>> handles;
  std::string banner = "READY";
  for (int k = 0; k < count; ++k) {
    char* data = nullptr;
    if (shared_tensors) {
      auto t = (*conn)->AllocateTensor(proto.dtype, proto.shape);
      if (!t.ok()) {
        std::cout << "ERROR " << t.status().ToString() << std::endl;
        return 1;
      }
      shared[static_cast<std::size_t>(k)] = std::move(*t);
      data = static_cast<char*>(shared[static_cast<std::size_t>(k)].data());
    } else {
      tensors[static_cast<std::size_t>(k)].resize(proto.nbytes());
      data = tensors[static_cast<std::size_t>(k)].data();
    }
    for (std::size_t i = 0; i < proto.nbytes(); ++i) {
      data[i] = testing::PatternByte(static_cast<std::uint64_t>(k) + 1, i);
    }
    StagePayload p;
    p.request_id = "req-" + std::to_string(k);
    p.tensor = proto;
    p.tensor.data = data;
    if (!device.empty()) {
      Result<char*> dev = SimCopyOf(tensors[static_cast<std::size_t>(k)]);
      if (!dev.ok()) {
        std::cout << "ERROR " << dev.status().ToString() << std::endl;
        return 1;
      }
      p.tensor.data = *dev;
      p.tensor.memory = MemoryKind::kDevice;
      p.tensor.device = 0;
    }
    p.chunk_dim = dim;
    p.num_chunks = chunks;
    p.progressive = progressive;
    auto h = (*conn)->Publish(p);
    if (!h.ok()) {
      std::cout << "ERROR " << h.status().ToString() << std::endl;
      return 1;
    }
    if (c.mode == TransferMode::kStore && !progressive) {
      Status s = (*h)->Wait(std::chrono::seconds(30));
      if (!s.ok()) {
        std::cout << "ERROR " << s.ToString() << std::endl;
        return 1;
      }
    }
    std::string hex;
    for (unsigned char ch : (*h)->descriptor().Encode()) {
      static const char* kDigits = "0123456789abcdef";
      hex += kDigits[ch >> 4];
      hex += kDigits[ch & 15];
    }
    banner += " " + hex;
    handles.push_back(std::move(*h));
  }
  std::cout << banner << std::endl;
  std::vector<std::thread> markers;
  if (progressive) {
    for (int k = 0; k < count; ++k) {
      markers.emplace_back([&, k] {
        const int delay = k == slow ? slow_ms : chunk_ms;
        for (int i = 0; i < chunks; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(delay));
          (void)handles[static_cast<std::size_t>(k)]->MarkReady(i);
        }
      });
    }
  }
  char buf[64];
  while (::read(0, buf, sizeof(buf)) > 0) {
  }
  for (auto& m : markers) {
    m.join();
  }
  return 0;
}
