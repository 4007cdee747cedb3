// The connector across processes: a producer process (connector_peer) and
// a consumer here, with a master and a store node as processes too.
#include "sluice/connector/connector.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "child_process.h"
#include "device/testing/sim_memory.h"
#include "transfer/testing/engine_pair.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

PayloadDescriptor FromHex(const std::string& hex) {
  std::string bytes;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  auto d = PayloadDescriptor::Decode(bytes);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return *d;
}

class ConnectorProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    master_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{SLUICE_BIN, "master", "--listen", "127.0.0.1:0", "--metrics-port",
                                 "0", "--exit-on-stdin-eof"});
    ASSERT_EQ(master_->Word(1), "master") << master_->banner();
    node_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{SLUICE_BIN, "store-node", "--master", master_->Word(2), "--memory",
                                 "256MiB", "--exit-on-stdin-eof"});
    ASSERT_EQ(node_->Word(1), "store-node") << node_->banner();
    ConnectorConfig c;
    c.role = "decode";
    c.store.master = master_->Word(2);
    c.consume_timeout = 20s;
    auto conn = DiffusionConnector::Create(c);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    consumer_ = std::move(*conn);
    // The node registers asynchronously: wait until the master counts it.
    const auto deadline = Clock::now() + 10s;
    while (Metric("sluice_store_nodes") < 1 && Clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_EQ(Metric("sluice_store_nodes"), 1);
  }

  double Metric(const std::string& name) {
    httplib::Client http("http://" + master_->Word(3));
    auto res = http.Get("/metrics");
    if (!res) {
      return -1;
    }
    const std::size_t at = res->body.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stod(res->body.substr(at + name.size() + 2));
  }

  std::unique_ptr<ChildProcess> Producer(std::vector<std::string> args) {
    std::vector<std::string> argv = {SLUICE_CONNECTOR_PEER_BIN, "--master", master_->Word(2)};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = std::make_unique<ChildProcess>(argv);
    EXPECT_EQ(p->Word(0), "READY") << p->banner();
    return p;
  }

  // Consumes `d` into a fresh tensor; checks chunk order and every byte
  // against the producer's pattern for payload `k`.
  // `arrived` (optional): when each chunk came out of the stream.
  Status ConsumeAndCheck(const PayloadDescriptor& d, int k,
                         std::vector<Clock::time_point>* arrived = nullptr) {
    TensorView t{nullptr, d.dtype, d.shape, {}};
    std::vector<char> dst(t.nbytes(), 0);
    t.data = dst.data();
    SLUICE_ASSIGN_OR_RETURN(auto stream, consumer_->Consume(d, t));
    int n = 0;
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(auto chunk, stream->Next());
      if (!chunk.has_value()) {
        break;
      }
      if (chunk->index != n++) {
        return InternalError("chunk out of order");
      }
      if (arrived != nullptr) {
        arrived->push_back(Clock::now());
      }
    }
    stream.reset();
    consumer_->Forget(dst.data());
    for (std::size_t i = 0; i < dst.size(); ++i) {
      if (dst[i] != PatternByte(static_cast<std::uint64_t>(k) + 1, i)) {
        return InternalError("byte " + std::to_string(i) + " differs");
      }
    }
    return n == d.num_chunks ? Status::Ok() : InternalError("missing chunks");
  }

  std::unique_ptr<ChildProcess> master_;
  std::unique_ptr<ChildProcess> node_;
  std::unique_ptr<DiffusionConnector> consumer_;
};

TEST_F(ConnectorProcessTest, EveryModeWholeAndChunkedAlongDims0And2IsByteExact) {
  for (std::string mode : {"p2p", "store"}) {
    for (auto [dim, chunks] : {std::pair{-1, 1}, {0, 8}, {2, 8}}) {
      SCOPED_TRACE(mode + " dim " + std::to_string(dim));
      auto p = Producer({"--mode", mode, "--shape", "8,16,16,24,32", "--dim", std::to_string(dim),
                         "--chunks", std::to_string(chunks)});
      const PayloadDescriptor d = FromHex(p->Word(1));
      EXPECT_EQ(TransferModeName(d.mode), mode);
      Status s = ConsumeAndCheck(d, 0);
      EXPECT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(consumer_->Release(d).ok());
    }
  }
  const auto deadline = Clock::now() + 5s;
  while (Metric("sluice_store_objects") != 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(Metric("sluice_store_objects"), 0) << "delete-on-consume leaves the store empty";
}

// Device tensors at both ends across processes (sim): the producer
// publishes from its device memory, this process consumes into its own;
// p2p opens the producer's allocation through device IPC, store mode puts
// into and gets from the node's memory through its mapping. Nothing crosses
// tcp; and a producer killed mid-stream fails the consumer, not hangs it.
TEST_F(ConnectorProcessTest, DeviceTensorsMoveBetweenProcessesInEveryMode) {
  testing::SimMemory mem;
  ConnectorConfig c;
  c.role = "decode";
  c.store.master = master_->Word(2);
  c.consume_timeout = 20s;
  c.engine.device = "sim";
  auto conn = DiffusionConnector::Create(c);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto tcp_bytes = [&] {
    std::uint64_t n = 0;
    for (const TransportStats& s : (*conn)->engine().TransportCounters()) {
      n += s.name == "tcp" ? s.bytes_read + s.bytes_written : 0;
    }
    return n;
  };
  const std::uint64_t tcp_before = tcp_bytes();
  for (std::string mode : {"p2p", "store"}) {
    for (auto [dim, chunks] : {std::pair{-1, 1}, {2, 8}}) {
      SCOPED_TRACE(mode + " dim " + std::to_string(dim));
      auto p = Producer({"--mode", mode, "--device", "sim", "--shape", "2,4,16,24,32", "--dim",
                         std::to_string(dim), "--chunks", std::to_string(chunks)});
      const PayloadDescriptor d = FromHex(p->Word(1));
      EXPECT_EQ(d.memory, MemoryKind::kDevice);
      TensorView dst{nullptr, d.dtype, d.shape, {}, MemoryKind::kDevice, 1};
      dst.data = mem.Allocate(1, dst.nbytes());
      auto stream = (*conn)->Consume(d, dst);
      ASSERT_TRUE(stream.ok()) << stream.status().ToString();
      int n = 0;
      while (true) {
        auto chunk = (*stream)->Next();
        ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
        if (!chunk->has_value()) {
          break;
        }
        EXPECT_EQ((*chunk)->index, n++);
      }
      EXPECT_EQ(n, chunks);
      stream->reset();
      const std::vector<char> got = mem.Read(dst.data, dst.nbytes());
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], PatternByte(1, i)) << "byte " << i;
      }
      EXPECT_TRUE((*conn)->Release(d).ok());
      (*conn)->Forget(dst.data);
    }
  }
  EXPECT_EQ(tcp_bytes(), tcp_before) << "device payloads went over tcp";

  auto p = Producer({"--mode", "p2p", "--device", "sim", "--dim", "2", "--chunks", "8",
                     "--progressive", "--chunk-ms", "100000"});
  const PayloadDescriptor d = FromHex(p->Word(1));
  TensorView dst{nullptr, d.dtype, d.shape, {}, MemoryKind::kDevice, 1};
  dst.data = mem.Allocate(1, dst.nbytes());
  auto stream = (*conn)->Consume(d, dst);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const auto start = Clock::now();
  p->Kill();
  auto chunk = (*stream)->Next();
  EXPECT_FALSE(chunk.ok());
  EXPECT_LT(Clock::now() - start, 10s) << "a dead producer must fail the consumer, not hang it";
}

TEST_F(ConnectorProcessTest, ConnectorTensorsAreReadThroughTheProducersSharedMemory) {
  for (auto [dim, chunks] : {std::pair{-1, 1}, {2, 8}}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    auto p = Producer({"--mode", "p2p", "--shape", "8,16,16,24,32", "--dim", std::to_string(dim),
                       "--chunks", std::to_string(chunks), "--shared-tensors"});
    const PayloadDescriptor d = FromHex(p->Word(1));
    // The producer's table marks the payload's region as a shared
    // allocation: this process maps it and copies with memcpy.
    auto seg = consumer_->engine().OpenSegment(d.producer_endpoint);
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    auto regions = consumer_->engine().SegmentRegions(*seg);
    ASSERT_TRUE(regions.ok());
    auto r = std::find_if(regions->begin(), regions->end(),
                          [&](const RegionInfo& i) { return i.key.value == d.region_key; });
    ASSERT_NE(r, regions->end());
    EXPECT_TRUE(r->shared);
    Status s = ConsumeAndCheck(d, 0);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(consumer_->Release(d).ok());
  }
}

TEST_F(ConnectorProcessTest, ConsumeInPlaceMapsAnotherProcesssTensorAndOutlivesIt) {
  auto p = Producer({"--mode", "p2p", "--shape", "8,16,16,24,32", "--shared-tensors"});
  const PayloadDescriptor d = FromHex(p->Word(1));
  auto v = consumer_->ConsumeInPlace(d);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const auto* bytes = static_cast<const char*>(v->view.data);
  auto matches = [&] {
    for (std::size_t i = 0; i < v->view.nbytes(); ++i) {
      if (bytes[i] != PatternByte(1, i)) {
        return false;
      }
    }
    return true;
  };
  EXPECT_TRUE(matches());
  EXPECT_TRUE(consumer_->Release(d).ok());
  p->Kill();  // The mapping keeps the pages: reading after the producer died is safe.
  EXPECT_TRUE(matches());
}

// The producer marks a chunk every 150 ms (8 chunks: the last ~1 s after
// the first). A consumer that is waiting gets each as it is marked, so the
// first arrives well before the last; delivering all of them once the last
// is marked would put them within a few ms of each other. (At 50 ms a
// consumer under ThreadSanitizer started after the last mark.)
TEST_F(ConnectorProcessTest, ConsumerArrivingFirstGetsChunksAsTheyAreMarked) {
  for (std::string mode : {"p2p", "store"}) {
    SCOPED_TRACE(mode);
    auto p = Producer({"--mode", mode, "--shape", "2,4,16,24,32", "--dim", "2", "--chunks", "8",
                       "--progressive", "--chunk-ms", "150"});
    const PayloadDescriptor d = FromHex(p->Word(1));
    std::vector<Clock::time_point> arrived;
    Status s = ConsumeAndCheck(d, 0, &arrived);
    EXPECT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(arrived.size(), 8u);
    // Marks are at least 150 ms apart (the producer sleeps between them);
    // even a consumer that came late, with only the last mark to wait for,
    // sees 150 ms between its first chunk and the last.
    EXPECT_GE(arrived.back() - arrived.front(), 40ms)
        << "chunks arrived together, not as they were marked";
    EXPECT_TRUE(consumer_->Release(d).ok());
  }
}

TEST_F(ConnectorProcessTest, ProducerDeathFailsP2pPromptlyButNotStore) {
  {
    auto p = Producer(
        {"--mode", "p2p", "--dim", "2", "--chunks", "8", "--progressive", "--chunk-ms", "100000"});
    const PayloadDescriptor d = FromHex(p->Word(1));
    std::vector<char> dst(TensorView{nullptr, d.dtype, d.shape, {}}.nbytes());
    auto stream = consumer_->Consume(d, TensorView{dst.data(), d.dtype, d.shape, {}});
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    const auto start = Clock::now();
    p->Kill();
    auto c = (*stream)->Next();
    EXPECT_FALSE(c.ok());
    EXPECT_NE(c.status().code(), StatusCode::kDeadlineExceeded) << c.status().ToString();
    EXPECT_LT(Clock::now() - start, 10s) << "a dead producer must fail the consumer, not hang it";
    stream->reset();
    consumer_->Forget(dst.data());
  }
  {
    auto p = Producer({"--mode", "store", "--dim", "0", "--chunks", "2"});
    const PayloadDescriptor d = FromHex(p->Word(1));
    p->Kill();
    Status s = ConsumeAndCheck(d, 0);
    EXPECT_TRUE(s.ok()) << "store mode outlives its producer: " << s.ToString();
    EXPECT_TRUE(consumer_->Release(d).ok());
  }
}

TEST_F(ConnectorProcessTest, HundredConcurrentRequestsOneSlowOthersUnaffected) {
  for (std::string mode : {"p2p", "store"}) {
    SCOPED_TRACE(mode);
    auto p = Producer({"--mode", mode, "--shape", "1,4,8,16,16", "--dim", "2", "--chunks", "4",
                       "--count", "100", "--progressive", "--slow", "0", "--slow-ms", "1500"});
    std::vector<PayloadDescriptor> ds;
    for (int k = 0; k < 100; ++k) {
      ds.push_back(FromHex(p->Word(k + 1)));
    }
    const auto start = Clock::now();
    std::vector<double> done_s(100, -1);
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int k = 0; k < 100; ++k) {
      threads.emplace_back([&, k] {
        Status s = ConsumeAndCheck(ds[static_cast<std::size_t>(k)], k);
        if (!s.ok()) {
          ++failures;
          ADD_FAILURE() << "request " << k << ": " << s.ToString();
        }
        done_s[static_cast<std::size_t>(k)] =
            std::chrono::duration<double>(Clock::now() - start).count();
        (void)consumer_->Release(ds[static_cast<std::size_t>(k)]);
      });
    }
    for (auto& t : threads) {
      t.join();
    }
    EXPECT_EQ(failures.load(), 0);
    const double slowest_fast = *std::max_element(done_s.begin() + 1, done_s.end());
    // The other 99 take up to ~2.7 s under ASan beside other suites on two
    // cores; the slow one's last chunk comes at ~6 s.
    EXPECT_GE(done_s[0], 5.25) << "the slow request marks a chunk every 1.5 s";
    EXPECT_LT(slowest_fast, done_s[0] - 1.0)
        << "the other 99 finished while the slow one still waited for chunks";
  }
}

}  // namespace
}  // namespace sluice::testing
