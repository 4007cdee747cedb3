// Device tensors through the connector, on the sim backend: every mode,
// whole and in 8 chunks along dimension 2, with device memory at either end
// or both, byte-exact; on one host nothing of them crosses tcp. Descriptors
// carry the producer's memory kind (version 3), and host payloads still
// encode as version 2.
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/connector/connector.h"

#include "connector/testing/connector_fixture.h"
#include "device/testing/sim_memory.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::ConnectorTest;
using testing::SimMemory;

std::uint64_t TcpBytes(DiffusionConnector& c) {
  for (const TransportStats& s : c.engine().TransportCounters()) {
    if (s.name == "tcp") {
      return s.bytes_read + s.bytes_written;
    }
  }
  return 0;
}

TEST(DeviceDescriptorTest, DeviceMemoryIsVersion3AndHostPayloadsStayVersion2) {
  PayloadDescriptor d;
  d.request_id = "dev";
  d.dtype = DType::kBF16;
  d.shape = {1, 4, 16};
  d.mode = TransferMode::kStore;
  d.key_prefix = "sluice/dev";
  const std::string host = d.Encode();
  EXPECT_EQ(host[4], 2) << "a host payload reaches version-2 consumers";
  EXPECT_EQ(nlohmann::json::parse(d.ToJson())["version"], 2);
  d.memory = MemoryKind::kDevice;
  d.device = 1;
  const std::string dev = d.Encode();
  EXPECT_EQ(dev[4], 3);
  for (const Result<PayloadDescriptor>& r :
       {PayloadDescriptor::Decode(dev), PayloadDescriptor::FromJson(d.ToJson())}) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->memory, MemoryKind::kDevice);
    EXPECT_EQ(r->device, 1);
    EXPECT_EQ(r->Encode(), dev);
  }
  Result<PayloadDescriptor> h = PayloadDescriptor::Decode(host);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->memory, MemoryKind::kHost);
  EXPECT_EQ(h->device, -1);

  d.device = 4096;
  EXPECT_NE(d.Validate().message().find("device 4096"), std::string_view::npos);
  d.memory = MemoryKind::kHost;
  d.device = 0;
  EXPECT_NE(d.Validate().message().find("host memory"), std::string_view::npos);
  nlohmann::json j = nlohmann::json::parse(h->ToJson());
  j["memory"] = "tpu";
  Result<PayloadDescriptor> bad = PayloadDescriptor::FromJson(j.dump());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'tpu'"), std::string_view::npos)
      << bad.status().ToString();
}

TEST_F(ConnectorTest, DeviceTensorsMoveInEveryModeWholeAndChunkedByteExact) {
  SimMemory mem;
  std::unique_ptr<DiffusionConnector> producer = Make("denoise", "sim");
  std::unique_ptr<DiffusionConnector> consumer = Make("decode", "sim");
  const std::vector<std::int64_t> shape = {1, 4, 16, 10, 12};
  const TensorView like{nullptr, DType::kBF16, shape, {}};
  const std::size_t bytes = like.nbytes();
  std::vector<char> pattern(bytes);
  for (std::size_t i = 0; i < bytes; ++i) {
    pattern[i] = static_cast<char>((i * 131 + 17) % 251);
  }
  char* src_dev = mem.Allocate(0, bytes);
  mem.Copy(src_dev, pattern.data(), bytes);
  char* dst_dev = mem.Allocate(1, bytes);
  // Host sources come from connector tensors: same-host peers map them.
  Result<SharedTensor> src_host = producer->AllocateTensor(DType::kBF16, shape);
  ASSERT_TRUE(src_host.ok()) << src_host.status().ToString();
  std::memcpy(src_host->data(), pattern.data(), bytes);
  std::vector<char> dst_host(bytes);

  const std::uint64_t tcp_before = TcpBytes(*producer) + TcpBytes(*consumer);
  int n = 0;
  for (TransferMode mode : {TransferMode::kP2p, TransferMode::kStore}) {
    for (auto [dim, chunks] : {std::pair{-1, 1}, {2, 8}}) {
      for (auto [from_dev, to_dev] : {std::pair{true, true}, {true, false}, {false, true}}) {
        SCOPED_TRACE(std::string(TransferModeName(mode)) + " dim " + std::to_string(dim) +
                     (from_dev ? " device" : " host") + (to_dev ? "->device" : "->host"));
        StagePayload p;
        p.request_id = "dev" + std::to_string(++n);
        p.tensor = from_dev ? TensorView{src_dev, DType::kBF16, shape, {}, MemoryKind::kDevice, 0}
                            : src_host->view();
        p.chunk_dim = dim;
        p.num_chunks = chunks;
        p.bound_consumer = mode == TransferMode::kP2p ? consumer->engine().endpoint() : "";
        auto h = producer->Publish(p);
        ASSERT_TRUE(h.ok()) << h.status().ToString();
        ASSERT_EQ((*h)->descriptor().mode, mode);
        auto d = PayloadDescriptor::Decode((*h)->descriptor().Encode());
        ASSERT_TRUE(d.ok()) << d.status().ToString();
        EXPECT_EQ(d->memory, from_dev ? MemoryKind::kDevice : MemoryKind::kHost);

        TensorView dst = to_dev
                             ? TensorView{dst_dev, DType::kBF16, shape, {}, MemoryKind::kDevice, 1}
                             : TensorView{dst_host.data(), DType::kBF16, shape, {}};
        mem.Copy(dst.data, std::vector<char>(bytes, 0).data(), bytes);
        auto stream = consumer->Consume(*d, dst);
        ASSERT_TRUE(stream.ok()) << stream.status().ToString();
        int got = 0;
        while (true) {
          auto chunk = (*stream)->Next();
          ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
          if (!chunk->has_value()) {
            break;
          }
          EXPECT_EQ((*chunk)->index, got++);
          // A chunk view is where its bytes landed, of the destination's kind.
          EXPECT_EQ((*chunk)->view.memory, dst.memory);
          EXPECT_EQ((*chunk)->view.device, dst.device);
        }
        EXPECT_EQ(got, chunks);
        ASSERT_EQ(mem.Read(dst.data, bytes), pattern);
        ASSERT_TRUE(consumer->Release(*d).ok());
        ASSERT_TRUE((*h)->WaitReleased(5s).ok());
      }
    }
  }
  // Device memory on one host goes through device IPC (p2p) or straight
  // between the device and the node's mapped memory (store): never tcp.
  EXPECT_EQ(TcpBytes(*producer) + TcpBytes(*consumer), tcp_before);
  EXPECT_EQ(producer->bytes_copied_outside_transfers(), 0u);
  EXPECT_EQ(consumer->bytes_copied_outside_transfers(), 0u);
}

TEST_F(ConnectorTest, DeviceTensorsNeedABackendAndAreNotReadInPlace) {
  SimMemory mem;
  char* dev = mem.Allocate(0, 4096);
  StagePayload p;
  p.request_id = "nobackend";
  p.tensor = TensorView{dev, DType::kU8, {4096}, {}, MemoryKind::kDevice, 0};
  p.bound_consumer = consumer_->engine().endpoint();
  // producer_ has no device backend.
  auto refused = producer_->Publish(p);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("ConnectorConfig::engine.device"),
            std::string_view::npos)
      << refused.status().ToString();

  std::vector<char> host(4096);
  p.tensor = TensorView{host.data(), DType::kU8, {4096}, {}, MemoryKind::kHost, 2};
  auto bad = producer_->Publish(p);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("host memory"), std::string_view::npos)
      << bad.status().ToString();

  std::unique_ptr<DiffusionConnector> producer = Make("denoise", "sim");
  p.tensor = TensorView{dev, DType::kU8, {4096}, {}, MemoryKind::kDevice, 0};
  auto h = producer->Publish(p);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  Result<PayloadView> v = consumer_->ConsumeInPlace((*h)->descriptor());
  EXPECT_EQ(v.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(v.status().message().find("device memory"), std::string_view::npos)
      << v.status().ToString();
  // Consumed into host memory by a connector without a backend: the
  // producer's engine serves its device memory.
  auto stream =
      consumer_->Consume((*h)->descriptor(), TensorView{host.data(), DType::kU8, {4096}, {}});
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  auto chunk = (*stream)->Next();
  EXPECT_TRUE(chunk.ok() && chunk->has_value()) << chunk.status().ToString();
  ASSERT_TRUE(consumer_->Release((*h)->descriptor()).ok());
}

}  // namespace
}  // namespace sluice
