// Descriptor encoding, chunk layout, and both modes end to end inside one
// process (an embedded master and store node; two connectors).
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/connector/connector.h"
#include "sluice/store/master.h"
#include "sluice/store/store_node.h"

#include "common/net.h"
#include "common/testing/eventually.h"
#include "connector/chunk_layout.h"
#include "connector/testing/connector_fixture.h"
#include "transfer/wire.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using internal::ByteRun;
using internal::ChunkLayout;
using internal::Eventually;
using testing::ConnectorTest;

PayloadDescriptor SampleP2p() {
  PayloadDescriptor d;
  d.request_id = "req-1";
  d.kind = PayloadKind::kLatent;
  d.dtype = DType::kBF16;
  d.shape = {1, 16, 21, 90, 160};
  d.chunk_dim = 2;
  d.num_chunks = 8;
  d.mode = TransferMode::kP2p;
  d.producer_endpoint = "127.0.0.1:7000";
  d.region_key = 0xFEDCBA9876543210ull;
  d.region_offset = 4096;
  d.payload_id = 0x8000000000000001ull;
  return d;
}

TEST(DescriptorTest, BinaryAndJsonRoundTrip) {
  PayloadDescriptor d = SampleP2p();
  const std::string bytes = d.Encode();
  EXPECT_LT(bytes.size(), 200u) << "small enough for a queue message";
  Result<PayloadDescriptor> back = PayloadDescriptor::Decode(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->Encode(), bytes);
  EXPECT_EQ(back->strides, (std::vector<std::int64_t>{4838400, 302400, 14400, 160, 1}));
  Result<PayloadDescriptor> j = PayloadDescriptor::FromJson(d.ToJson());
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->Encode(), bytes);
  PayloadDescriptor s;
  s.request_id = "r";
  s.dtype = DType::kF32;
  s.shape = {4};
  s.mode = TransferMode::kStore;
  s.key_prefix = "sluice/x";
  s.lease = *Lease::Parse("ttl:30");
  Result<PayloadDescriptor> sj = PayloadDescriptor::FromJson(s.ToJson());
  ASSERT_TRUE(sj.ok()) << sj.status().ToString();
  EXPECT_EQ(sj->lease, s.lease);
  EXPECT_EQ(sj->key_prefix, "sluice/x");
  EXPECT_EQ(s.StoreKeys(), (std::vector<std::string>{"sluice/x/0"}));
  // A complete chunked store payload may be one object, round-tripped.
  s.shape = {4, 8};
  s.chunk_dim = 1;
  s.num_chunks = 4;
  s.complete = true;
  EXPECT_EQ(s.StoreKeys().size(), 4u);
  s.one_object = true;
  EXPECT_EQ(s.StoreKeys(), (std::vector<std::string>{"sluice/x/all"}));
  EXPECT_EQ(s.StoreKey(3), "sluice/x/all");
  for (const Result<PayloadDescriptor>& r :
       {PayloadDescriptor::Decode(s.Encode()), PayloadDescriptor::FromJson(s.ToJson())}) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->one_object);
  }
  s.complete = false;  // A progressive payload's chunks are separate objects.
  EXPECT_NE(s.Validate().message().find("one_object"), std::string_view::npos);
  EXPECT_TRUE(SampleP2p().StoreKeys().empty());
}

TEST(DescriptorTest, TruncatedCorruptedAndNewerAreClearErrors) {
  const std::string bytes = SampleP2p().Encode();
  for (std::size_t n : {std::size_t{0}, std::size_t{10}, bytes.size() - 1}) {
    Result<PayloadDescriptor> r = PayloadDescriptor::Decode(bytes.substr(0, n));
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("truncated"), std::string_view::npos)
        << r.status().ToString();
  }
  std::string flipped = bytes;
  flipped[bytes.size() - 3] ^= 0x40;
  EXPECT_NE(PayloadDescriptor::Decode(flipped).status().message().find("checksum"),
            std::string_view::npos);
  std::string newer = bytes;
  newer[4] = static_cast<char>(PayloadDescriptor::kVersion + 1);
  Result<PayloadDescriptor> n = PayloadDescriptor::Decode(newer);
  EXPECT_EQ(n.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(n.status().message().find("newer"), std::string_view::npos);
  EXPECT_NE(
      PayloadDescriptor::Decode("hello world, not a descriptor").status().message().find("magic"),
      std::string_view::npos);
  EXPECT_FALSE(PayloadDescriptor::FromJson("{").ok());
  EXPECT_NE(PayloadDescriptor::FromJson(R"({"version":1,"request_id":"x"})")
                .status()
                .message()
                .find("'kind'"),
            std::string_view::npos);
  EXPECT_EQ(PayloadDescriptor::FromJson(R"({"version":9})").status().code(),
            StatusCode::kFailedPrecondition);
  PayloadDescriptor bad = SampleP2p();
  bad.num_chunks = 22;  // More chunks than shape[2].
  EXPECT_FALSE(bad.Validate().ok());
  EXPECT_FALSE(Lease::Parse("ttl:0").ok());
  EXPECT_FALSE(Lease::Parse("forever").ok());
  EXPECT_FALSE(ParseDType("f128").ok());
}

// Found by descriptor_fuzz: a shape whose element count overflows wrapped
// around (a 2^64-element tensor counted as small) and the stride
// computation overflowed a signed integer; such shapes are now refused.
TEST(DescriptorTest, AShapeTooLargeToCountIsRefused) {
  PayloadDescriptor d = SampleP2p();
  d.shape = {std::int64_t{1} << 32, std::int64_t{1} << 32};
  d.chunk_dim = -1;
  d.num_chunks = 1;
  EXPECT_EQ(NumElements(d.shape), UINT64_MAX);
  Status s = d.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("2^48"), std::string_view::npos) << s.ToString();
  d.shape = {8, std::int64_t{1} << 62, 8};
  EXPECT_FALSE(d.Validate().ok());
  EXPECT_EQ(RowMajorStrides(d.shape)[0], INT64_MAX);
}

// Found by descriptor_fuzz: a store descriptor whose JSON also carried p2p
// fields kept them in its binary form but not in its JSON, so the two
// forms of one descriptor differed. The other mode's fields are dropped.
TEST(DescriptorTest, TheOtherModesFieldsAreDropped) {
  PayloadDescriptor p2p = SampleP2p();
  nlohmann::json j = nlohmann::json::parse(p2p.ToJson());
  j["mode"] = "store";
  j["key_prefix"] = "sluice/x";
  Result<PayloadDescriptor> store = PayloadDescriptor::FromJson(j.dump());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE(store->producer_endpoint.empty());
  EXPECT_EQ(store->region_key, 0u);
  Result<PayloadDescriptor> again = PayloadDescriptor::FromJson(store->ToJson());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->Encode(), store->Encode());
  Result<PayloadDescriptor> binary = PayloadDescriptor::Decode(store->Encode());
  ASSERT_TRUE(binary.ok());
  EXPECT_EQ(binary->ToJson(), store->ToJson());
}

TEST(ChunkLayoutTest, RunsCoverTheTensorExactlyOnce) {
  struct Case {
    std::vector<std::int64_t> shape;
    int dim;
    int chunks;
  };
  for (const Case& c : {Case{{1, 16, 21, 90, 160}, 2, 8}, Case{{8, 3, 5}, 0, 8},
                        Case{{4, 6, 5}, 1, 4}, Case{{7}, -1, 1}, Case{{3, 4, 9}, 2, 9}}) {
    Result<ChunkLayout> l = ChunkLayout::Make(c.shape, 2, c.dim, c.chunks);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    std::vector<int> hits(l->total_bytes(), 0);
    std::uint64_t sum = 0;
    for (int i = 0; i < l->num_chunks(); ++i) {
      std::uint64_t bytes = 0;
      for (const ByteRun& r : l->Runs(i)) {
        for (std::uint64_t b = r.offset; b < r.offset + r.length; ++b) {
          ++hits[b];
        }
        bytes += r.length;
      }
      EXPECT_EQ(bytes, l->chunk_bytes(i));
      sum += bytes;
    }
    EXPECT_EQ(sum, l->total_bytes());
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  }
  Result<ChunkLayout> t = ChunkLayout::Make({1, 16, 21, 90, 160}, 2, 2, 8);
  EXPECT_EQ(t->length(0), 3);
  EXPECT_EQ(t->length(7), 2);
  EXPECT_EQ(t->Runs(0).size(), 16u) << "one run per (B, C) pair";
  EXPECT_EQ(ChunkLayout::Make({8, 3}, 4, 0, 8)->Runs(3).size(), 1u);
  EXPECT_FALSE(ChunkLayout::Make({4, 4}, 4, 2, 1).ok());
  EXPECT_FALSE(ChunkLayout::Make({4, 4}, 4, 1, 5).ok());
}

// An embedded master + store node and two connectors (producer, consumer).
TEST_F(ConnectorTest, EveryModeAndChunkingMovesExactBytes) {
  const std::vector<std::int64_t> shape = {2, 3, 16, 10, 12};
  std::vector<std::uint16_t> src(2 * 3 * 16 * 10 * 12), dst(src.size());
  std::iota(src.begin(), src.end(), std::uint16_t{7});
  struct Case {
    TransferMode mode;
    int dim;
    int chunks;
  };
  for (const Case& c : {Case{TransferMode::kP2p, -1, 1}, Case{TransferMode::kP2p, 0, 2},
                        Case{TransferMode::kP2p, 2, 8}, Case{TransferMode::kStore, -1, 1},
                        Case{TransferMode::kStore, 0, 2}, Case{TransferMode::kStore, 2, 8}}) {
    SCOPED_TRACE(std::string(TransferModeName(c.mode)) + " dim " + std::to_string(c.dim));
    std::fill(dst.begin(), dst.end(), 0);
    StagePayload p;
    p.request_id = "r" + std::to_string(c.dim);
    p.tensor = TensorView{src.data(), DType::kBF16, shape, {}};
    p.chunk_dim = c.dim;
    p.num_chunks = c.chunks;
    // auto mode: a bound consumer gives p2p, none gives store.
    p.bound_consumer = c.mode == TransferMode::kP2p ? consumer_->engine().endpoint() : "";
    auto h = producer_->Publish(p);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ((*h)->descriptor().mode, c.mode);
    auto d = PayloadDescriptor::Decode((*h)->descriptor().Encode());
    ASSERT_TRUE(d.ok());
    auto stream = consumer_->Consume(*d, TensorView{dst.data(), DType::kBF16, shape, {}});
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
    EXPECT_EQ(n, c.chunks);
    EXPECT_EQ(dst, src);
    ASSERT_TRUE(consumer_->Release(*d).ok());
    ASSERT_TRUE((*h)->WaitReleased(5s).ok());
    EXPECT_TRUE((*h)->Wait(1s).ok());
  }
  // Reads release their leases one-way: deletion shows a moment later.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (master_->Metrics().objects != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(master_->Metrics().objects, 0u) << "delete-on-consume leaves the store empty";
}

TEST_F(ConnectorTest, ProgressiveChunksLandInOrderAsTheyAreMarked) {
  const std::vector<std::int64_t> shape = {1, 4, 8, 6};
  std::vector<float> src(4 * 8 * 6), dst(src.size(), -1);
  std::iota(src.begin(), src.end(), 1.0f);
  for (TransferMode mode : {TransferMode::kP2p, TransferMode::kStore}) {
    StagePayload p;
    p.request_id = "prog";
    p.tensor = TensorView{src.data(), DType::kF32, shape, {}};
    p.chunk_dim = 2;
    p.num_chunks = 4;
    p.progressive = true;
    p.bound_consumer = mode == TransferMode::kP2p ? "x" : "";
    auto h = producer_->Publish(p);
    ASSERT_TRUE(h.ok());
    // The consumer arrives before any chunk exists.
    auto stream =
        consumer_->Consume((*h)->descriptor(), TensorView{dst.data(), DType::kF32, shape, {}});
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE((*h)->MarkReady(i).ok());
      auto c = (*stream)->Next();
      ASSERT_TRUE(c.ok() && c->has_value()) << c.status().ToString();
      EXPECT_EQ((*c)->index, i);
      EXPECT_EQ((*c)->view.shape[2], 2);
      const float* v = static_cast<const float*>((*c)->view.data);
      EXPECT_EQ(v[0], src[static_cast<std::size_t>(i) * 2 * 6]);
    }
    EXPECT_FALSE((*stream)->Next()->has_value());
    EXPECT_EQ((*h)->MarkReady(9).code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(consumer_->Release((*h)->descriptor()).ok());
  }
}

TEST_F(ConnectorTest, BadInputIsRejectedBeforeAnyTransfer) {
  std::vector<float> t(24);
  StagePayload p;
  p.request_id = "bad";
  p.tensor = TensorView{t.data(), DType::kF32, {2, 3, 4}, {1, 2, 6}};  // Column-major.
  EXPECT_EQ(producer_->Publish(p).status().code(), StatusCode::kInvalidArgument);
  p.tensor.strides.clear();
  p.chunk_dim = 1;
  p.num_chunks = 4;  // shape[1] is 3.
  EXPECT_EQ(producer_->Publish(p).status().code(), StatusCode::kInvalidArgument);
  p.num_chunks = 3;
  p.request_id = "";
  EXPECT_EQ(producer_->Publish(p).status().code(), StatusCode::kInvalidArgument);
  p.request_id = "ok";
  auto h = producer_->Publish(p);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::vector<float> wrong(24);
  auto s =
      consumer_->Consume((*h)->descriptor(), TensorView{wrong.data(), DType::kF32, {4, 6}, {}});
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("f32[2,3,4]"), std::string_view::npos)
      << s.status().ToString();
  s = consumer_->Consume((*h)->descriptor(), TensorView{wrong.data(), DType::kI32, {2, 3, 4}, {}});
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*h)->Wait(5s).ok()) << "`t` must outlive the publish";
  ConnectorConfig c;
  c.role = "Bad Role";
  EXPECT_EQ(DiffusionConnector::Create(c).status().code(), StatusCode::kInvalidArgument);
  c.role = "decode";
  c.mode = TransferMode::kStore;
  EXPECT_EQ(DiffusionConnector::Create(c).status().code(), StatusCode::kInvalidArgument);
}

// The region behind `key` in the table `c` holds for the peer at `endpoint`.
std::optional<RegionInfo> PeerRegion(DiffusionConnector& c, const std::string& endpoint,
                                     std::uint64_t key) {
  auto seg = c.engine().OpenSegment(endpoint);
  auto regions =
      seg.ok() ? c.engine().SegmentRegions(*seg) : Result<std::vector<RegionInfo>>(seg.status());
  if (regions.ok()) {
    for (const RegionInfo& r : *regions) {
      if (r.key.value == key) {
        return r;
      }
    }
  }
  return std::nullopt;
}

TEST_F(ConnectorTest, ConnectorTensorsArePublishedThroughTheSharedMapping) {
  const std::vector<std::int64_t> shape = {2, 3, 16, 10, 12};
  auto t = producer_->AllocateTensor(DType::kBF16, shape);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->nbytes(), 2u * 3 * 16 * 10 * 12 * 2);
  EXPECT_EQ(t->view().shape, shape);
  EXPECT_TRUE(t->view().contiguous());
  auto* src = static_cast<std::uint16_t*>(t->data());
  const std::size_t n = t->nbytes() / 2;
  EXPECT_TRUE(std::all_of(src, src + n, [](std::uint16_t v) { return v == 0; }));
  std::iota(src, src + n, std::uint16_t{3});

  StagePayload p;
  p.request_id = "shared";
  p.tensor = t->view();
  p.chunk_dim = 2;
  p.num_chunks = 8;
  p.bound_consumer = consumer_->engine().endpoint();
  auto h = producer_->Publish(p);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  const PayloadDescriptor d = (*h)->descriptor();
  ASSERT_EQ(d.mode, TransferMode::kP2p);
  // The consumer sees a shared allocation: it maps it and copies by memcpy.
  auto region = PeerRegion(*consumer_, d.producer_endpoint, d.region_key);
  ASSERT_TRUE(region.has_value());
  EXPECT_TRUE(region->shared);

  // A connector tensor works as dst too.
  auto dst = consumer_->AllocateTensor(DType::kBF16, shape);
  ASSERT_TRUE(dst.ok()) << dst.status().ToString();
  auto stream = consumer_->Consume(d, dst->view());
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  int chunks = 0;
  while (true) {
    auto c = (*stream)->Next();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    if (!c->has_value()) {
      break;
    }
    ++chunks;
  }
  EXPECT_EQ(chunks, 8);
  EXPECT_EQ(std::memcmp(dst->data(), t->data(), t->nbytes()), 0);
  ASSERT_TRUE(consumer_->Release(d).ok());
  ASSERT_TRUE((*h)->WaitReleased(5s).ok());

  // Destroying the tensor drops its registration: peers stop seeing it.
  const std::uint64_t key = d.region_key;
  *t = SharedTensor();
  EXPECT_EQ(t->data(), nullptr);
  EXPECT_TRUE(Eventually([&] { return !PeerRegion(*consumer_, d.producer_endpoint, key); }))
      << "the freed tensor's region is still in the producer's table";
}

TEST_F(ConnectorTest, ConsumeInPlaceMapsTheProducersTensorWithoutCopying) {
  auto t = producer_->AllocateTensor(DType::kF32, {4, 8, 16});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  float* src = static_cast<float*>(t->data());
  std::iota(src, src + 4 * 8 * 16, 0.5f);
  StagePayload p;
  p.request_id = "in-place";
  p.tensor = t->view();
  p.bound_consumer = consumer_->engine().endpoint();
  auto h = producer_->Publish(p);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  const PayloadDescriptor d = (*h)->descriptor();

  auto v = consumer_->ConsumeInPlace(d);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->view.dtype, DType::kF32);
  EXPECT_EQ(v->view.shape, (std::vector<std::int64_t>{4, 8, 16}));
  const auto* seen = static_cast<const float*>(v->view.data);
  EXPECT_NE(static_cast<const void*>(seen), t->data()) << "the consumer maps its own view";
  EXPECT_EQ(std::memcmp(seen, src, t->nbytes()), 0);
  src[77] = -1.0f;  // No copy: the view is the producer's memory.
  EXPECT_EQ(seen[77], -1.0f);
  ASSERT_TRUE(consumer_->Release(d).ok());
  ASSERT_TRUE((*h)->WaitReleased(5s).ok());
  *t = SharedTensor();  // The producer frees its tensor: the view stays mapped.
  EXPECT_EQ(seen[78], 78.5f);
}

TEST_F(ConnectorTest, ConsumeInPlaceNamesWhyAPayloadCannotBeReadInPlace) {
  std::vector<float> plain(64, 1.0f);
  StagePayload p;
  p.request_id = "plain";
  p.tensor = TensorView{plain.data(), DType::kF32, {64}, {}};
  p.bound_consumer = consumer_->engine().endpoint();
  auto h = producer_->Publish(p);
  ASSERT_TRUE(h.ok());
  auto v = consumer_->ConsumeInPlace((*h)->descriptor());
  EXPECT_EQ(v.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(v.status().message().find("not a shared allocation"), std::string_view::npos)
      << v.status().ToString();
  ASSERT_TRUE(consumer_->Release((*h)->descriptor()).ok());
  ASSERT_TRUE((*h)->WaitReleased(5s).ok());

  p.request_id = "progressive";
  p.progressive = true;
  p.chunk_dim = 0;
  p.num_chunks = 2;
  h = producer_->Publish(p);
  ASSERT_TRUE(h.ok());
  v = consumer_->ConsumeInPlace((*h)->descriptor());
  EXPECT_EQ(v.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(v.status().message().find("one by one"), std::string_view::npos)
      << v.status().ToString();
  ASSERT_TRUE(consumer_->Release((*h)->descriptor()).ok());

  p.request_id = "stored-by-chunk";
  p.bound_consumer.clear();  // auto: the store; progressive: one object per chunk.
  h = producer_->Publish(p);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->MarkReady(0).ok() && (*h)->MarkReady(1).ok());
  ASSERT_TRUE((*h)->Wait(5s).ok());
  v = consumer_->ConsumeInPlace((*h)->descriptor());
  EXPECT_EQ(v.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(v.status().message().find("separate store objects"), std::string_view::npos)
      << v.status().ToString();
  ASSERT_TRUE(consumer_->Release((*h)->descriptor()).ok());
}

TEST_F(ConnectorTest, ConsumeInPlaceReadsAStorePayloadUnderAReadLease) {
  std::vector<float> src(2 * 8 * 16);
  std::iota(src.begin(), src.end(), 2.0f);
  StagePayload p;
  p.request_id = "stored";
  p.tensor = TensorView{src.data(), DType::kF32, {2, 8, 16}, {}};
  p.chunk_dim = 2;
  p.num_chunks = 8;  // Complete at publish: one store object, chunk after chunk.
  auto across = producer_->Publish(p);
  ASSERT_TRUE(across.ok()) << across.status().ToString();
  auto refused = consumer_->ConsumeInPlace((*across)->descriptor());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("not in the tensor's layout"), std::string_view::npos)
      << refused.status().ToString();
  ASSERT_TRUE((*across)->Wait(5s).ok());
  ASSERT_TRUE(consumer_->Release((*across)->descriptor()).ok());
  ASSERT_TRUE(Eventually([&] { return master_->Metrics().objects == 0; }));

  p.chunk_dim = 0;  // Chunk after chunk is the tensor's layout now.
  p.num_chunks = 2;
  auto h = producer_->Publish(p);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  const PayloadDescriptor d = (*h)->descriptor();
  ASSERT_EQ(d.mode, TransferMode::kStore);
  auto v = consumer_->ConsumeInPlace(d);  // Waits for the put if needed.
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->view.shape, (std::vector<std::int64_t>{2, 8, 16}));
  EXPECT_EQ(std::memcmp(v->view.data, src.data(), src.size() * sizeof(float)), 0);
  EXPECT_EQ(master_->Metrics().objects, 1u) << "the view's read lease keeps the payload";
  v->keep.reset();  // Ends the read: delete-on-consume counts it.
  EXPECT_TRUE(Eventually([&] { return master_->Metrics().objects == 0; }));
  EXPECT_TRUE(consumer_->Release(d).ok());
}

TEST_F(ConnectorTest, AConnectorTensorMayOutliveItsConnector) {
  std::unique_ptr<DiffusionConnector> c = Make("encode");
  auto t = c->AllocateTensor(DType::kF32, {4, 1024});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  SharedTensor moved = std::move(*t);
  EXPECT_EQ(t->data(), nullptr) << "a moved-from tensor is empty";
  c.reset();
  static_cast<float*>(moved.data())[4095] = 1.5f;  // Still mapped (ASan checks).
  EXPECT_EQ(static_cast<float*>(moved.data())[4095], 1.5f);
}

// A progressive handle outliving its connector: MarkReady used to reach the
// freed connector (ASan: heap-use-after-free); now it fails, and the
// handle's waits return.
TEST_F(ConnectorTest, AHandleOutlivingItsConnectorFailsInsteadOfReachingIt) {
  std::vector<float> src(64, 1.0f);
  for (TransferMode mode : {TransferMode::kP2p, TransferMode::kStore}) {
    std::unique_ptr<DiffusionConnector> c = Make("encode");
    StagePayload p;
    p.request_id = "orphan";
    p.tensor = TensorView{src.data(), DType::kF32, {4, 16}, {}};
    p.chunk_dim = 0;
    p.num_chunks = 4;
    p.progressive = true;
    p.bound_consumer = mode == TransferMode::kP2p ? "x" : "";  // Auto mode picks by it.
    auto h = c->Publish(p);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE((*h)->MarkReady(0).ok());
    c.reset();
    const Status late = (*h)->MarkReady(1);
    EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition) << late.ToString();
    EXPECT_EQ((*h)->Wait(2s).code(), StatusCode::kCancelled) << "the handle ended with it";
  }
}

// A stream outliving its consumer's connector: its destructor used to
// reach the freed connector (p2p: removing itself from the connector's
// stream table; ASan: heap-use-after-free). Now the stream ends cancelled
// with the connector, and destroying it later touches nothing of it.
TEST_F(ConnectorTest, AStreamOutlivingItsConnectorEndsInsteadOfReachingIt) {
  std::vector<float> src(64, 2.0f), dst(64, 0.0f);
  for (TransferMode mode : {TransferMode::kP2p, TransferMode::kStore}) {
    StagePayload p;
    p.request_id = "outlived";
    p.tensor = TensorView{src.data(), DType::kF32, {4, 16}, {}};
    p.chunk_dim = 0;
    p.num_chunks = 4;
    p.progressive = true;
    p.bound_consumer = mode == TransferMode::kP2p ? "x" : "";  // Auto mode picks by it.
    auto h = producer_->Publish(p);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE((*h)->MarkReady(0).ok());
    std::unique_ptr<DiffusionConnector> c = Make("decode");
    auto stream = c->Consume((*h)->descriptor(), TensorView{dst.data(), DType::kF32, {4, 16}, {}});
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    auto first = (*stream)->Next();
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_EQ((*first)->index, 0);
    c.reset();  // Chunks 1..3 never come.
    auto late = (*stream)->Next();
    EXPECT_EQ(late.status().code(), StatusCode::kCancelled) << late.status().ToString();
    stream->reset();  // After the connector: ASan watches this.
    (void)producer_->Release((*h)->descriptor());
  }
}

// A consumer that subscribes and then does not answer the producer's
// handshake back (here: a hand-made engine client naming a port that
// accepts and stays silent) used to stall the producer's one control
// thread for the engine's connect timeout (5 s), and with it every other
// payload's chunks. Now the answer runs on its own thread.
TEST_F(ConnectorTest, OneUnreachableConsumerDoesNotStallOtherPayloads) {
  std::uint16_t silent_port = 0;
  auto silent = internal::Listen(internal::HostPort{"127.0.0.1", 0}, &silent_port);
  ASSERT_TRUE(silent.ok());  // Never accepted: connects complete, handshakes hang.
  auto hp = internal::ParseHostPort(producer_->engine().endpoint(), false);
  auto fd = internal::ConnectTcp(*hp, 2000ms);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  ASSERT_TRUE(internal::SetIoTimeout(fd->get(), 3000ms).ok());
  internal::WireHeader h;
  std::string body;
  ASSERT_TRUE(internal::RecvAll(fd->get(), &h, sizeof(h)).ok());  // ServerHello.
  body.resize(h.length);
  ASSERT_TRUE(internal::RecvAll(fd->get(), body.data(), body.size()).ok());
  internal::ClientHello hello;  // No secret in this fixture.
  hello.endpoint = "127.0.0.1:" + std::to_string(silent_port);
  std::string out = internal::EncodeClientHello(hello);
  h = internal::MakeHeader(internal::FrameType::kClientHello, 0, out.size());
  ASSERT_TRUE(internal::SendAll(fd->get(), &h, sizeof(h)).ok());
  ASSERT_TRUE(internal::SendAll(fd->get(), out.data(), out.size()).ok());
  ASSERT_TRUE(internal::RecvAll(fd->get(), &h, sizeof(h)).ok());  // HelloOk.
  ASSERT_EQ(h.type, static_cast<std::uint8_t>(internal::FrameType::kHelloOk));
  body.resize(h.length);
  ASSERT_TRUE(internal::RecvAll(fd->get(), body.data(), body.size()).ok());
  // SUBSCRIBE(payload 12345, stream 1): type 1, then two little-endian u64.
  std::string sub(17, '\0');
  sub[0] = 1;
  sub[1] = static_cast<char>(12345 & 0xff);
  sub[2] = static_cast<char>(12345 >> 8);
  sub[9] = 1;
  h = internal::MakeHeader(internal::FrameType::kNotify, 0, sub.size());
  ASSERT_TRUE(internal::SendAll(fd->get(), &h, sizeof(h)).ok());
  ASSERT_TRUE(internal::SendAll(fd->get(), sub.data(), sub.size()).ok());
  std::this_thread::sleep_for(100ms);  // The producer is opening its segment back now.

  std::vector<std::int16_t> src(4096, 7), dst(4096, 0);
  StagePayload p;
  p.request_id = "unaffected";
  p.kind = PayloadKind::kLatent;
  p.tensor = TensorView{src.data(), DType::kI16, {4096}, {}};
  p.bound_consumer = consumer_->engine().endpoint();  // Auto mode: p2p.
  p.progressive = true;  // The consumer learns of its chunk from the producer's answer.
  auto handle = producer_->Publish(p);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  ASSERT_EQ((*handle)->descriptor().mode, TransferMode::kP2p);
  const auto t0 = std::chrono::steady_clock::now();
  auto stream =
      consumer_->Consume((*handle)->descriptor(), TensorView{dst.data(), DType::kI16, {4096}, {}});
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  ASSERT_TRUE((*handle)->MarkReady(0).ok());
  while (true) {
    auto c = (*stream)->Next();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    if (!c->has_value()) {
      break;
    }
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 2s) << "the other payload waited behind the unreachable consumer";
  EXPECT_EQ(dst, src);
  EXPECT_TRUE(consumer_->Release((*handle)->descriptor()).ok());
}

TEST_F(ConnectorTest, AllocateTensorRejectsBadShapes) {
  EXPECT_EQ(producer_->AllocateTensor(DType::kF32, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(producer_->AllocateTensor(DType::kF32, {1, 2, 3, 4, 5, 6, 7, 8, 9}).status().code(),
            StatusCode::kInvalidArgument);
  auto zero = producer_->AllocateTensor(DType::kF32, {4, 0});
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("dimension 1 is 0"), std::string_view::npos)
      << zero.status().ToString();
  EXPECT_EQ(producer_->AllocateTensor(DType::kF32, {-3}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(producer_->AllocateTensor(DType::kU8, {std::int64_t{1} << 40, std::int64_t{1} << 30})
                .status()
                .code(),
            StatusCode::kInvalidArgument)
      << "2^70 bytes overflow";
  auto huge = producer_->AllocateTensor(DType::kU8, {std::int64_t{1} << 52});
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted) << huge.status().ToString();
  EXPECT_NE(huge.status().message().find("available on this host"), std::string_view::npos)
      << huge.status().ToString();
  // The connector still serves.
  EXPECT_TRUE(producer_->AllocateTensor(DType::kU8, {16}).ok());
}

}  // namespace
}  // namespace sluice
