#include "transfer/wire.h"

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

TEST(WireTest, HelloOkRoundTrips) {
  HelloOk ok;
  ok.host = HostInfo::Self();
  WireRegion r;
  r.info = RegionInfo{RegionKey{42}, 0x1000, 4096, MemoryKind::kHost, Access::kRemoteRead, true};
  r.memfd = 7;
  r.memfd_offset = 64;
  r.memfd_size = 2 << 20;
  r.memfd_inode = 99;
  ok.table.version = 3;
  ok.table.regions.push_back(r);
  Result<HelloOk> back = DecodeHelloOk(EncodeHelloOk(ok));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->host.pid, ok.host.pid);
  EXPECT_EQ(back->host.probe, ok.host.probe);
  ASSERT_EQ(back->table.regions.size(), 1u);
  EXPECT_EQ(back->table.version, 3u);
  EXPECT_EQ(back->table.regions[0].info.key, RegionKey{42});
  EXPECT_EQ(back->table.regions[0].info.access, Access::kRemoteRead);
  EXPECT_TRUE(back->table.regions[0].info.shared);
  EXPECT_EQ(back->table.regions[0].memfd_inode, 99u);
}

TEST(WireTest, TruncatedOrPaddedBodiesAreMalformed) {
  ClientHello h;
  h.endpoint = "127.0.0.1:1";
  const std::string body = EncodeClientHello(h);
  EXPECT_TRUE(DecodeClientHello(body).ok());
  for (std::size_t cut = 0; cut < body.size(); cut += 7) {
    EXPECT_EQ(DecodeClientHello(body.substr(0, cut)).status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(DecodeClientHello(body + "x").status().code(), StatusCode::kInvalidArgument);
  RegionTable t;
  std::string table = EncodeTable(t);
  table[8] = static_cast<char>(0xff);  // Region count far beyond the bytes present.
  EXPECT_EQ(DecodeTable(table).status().code(), StatusCode::kInvalidArgument);
}

TEST(WireTest, MacDependsOnSecretAndNonce) {
  std::array<std::uint8_t, kNonceBytes> n1{}, n2{};
  n2[0] = 1;
  EXPECT_TRUE(MacEquals(HelloMac("", n1), std::array<std::uint8_t, 32>{}));
  EXPECT_FALSE(MacEquals(HelloMac("a", n1), HelloMac("b", n1)));
  EXPECT_FALSE(MacEquals(HelloMac("a", n1), HelloMac("a", n2)));
  EXPECT_TRUE(MacEquals(HelloMac("a", n1), HelloMac("a", n1)));
}

}  // namespace
}  // namespace sluice::internal
