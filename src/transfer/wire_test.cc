#include "transfer/wire.h"

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

TEST(WireTest, HelloOkRoundTripsWithEachTransportsBlobs) {
  HelloOk ok;
  ok.host = HostInfo::Self();
  ok.host.host_id = "rack-7.node-b";
  WireRegion r;
  r.info = RegionInfo{RegionKey{42}, 0x1000, 4096, MemoryKind::kHost, Access::kRemoteRead, true};
  r.access = {{"shm", std::string("\x07\0\0\0 maps", 9)}, {"rdma-x", std::string(4096, 'k')}};
  ok.table.version = 3;
  ok.table.regions.push_back(r);
  ok.links = {{"ucx", std::string(20000, 'a')}};
  Result<HelloOk> back = DecodeHelloOk(EncodeHelloOk(ok));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->host.pid, ok.host.pid);
  EXPECT_EQ(back->host.probe, ok.host.probe);
  EXPECT_EQ(back->host.host_id, "rack-7.node-b");
  ASSERT_EQ(back->table.regions.size(), 1u);
  EXPECT_EQ(back->table.version, 3u);
  EXPECT_EQ(back->table.regions[0].info.key, RegionKey{42});
  EXPECT_EQ(back->table.regions[0].info.access, Access::kRemoteRead);
  EXPECT_TRUE(back->table.regions[0].info.shared);
  EXPECT_EQ(back->table.regions[0].access, r.access);
  ASSERT_NE(back->table.regions[0].Blob("shm"), nullptr);
  EXPECT_EQ(*back->table.regions[0].Blob("shm"), r.access[0].bytes);
  EXPECT_EQ(back->table.regions[0].Blob("tcp"), nullptr);
  EXPECT_EQ(back->links, ok.links);
}

TEST(WireTest, ADeviceRegionCarriesItsDevice) {
  RegionTable t;
  WireRegion host;
  host.info = RegionInfo{RegionKey{1}, 0x1000, 4096, MemoryKind::kHost, Access::kRemoteRead};
  WireRegion dev;
  dev.info = RegionInfo{RegionKey{2}, 0x2000, 8192, MemoryKind::kDevice, Access::kRemoteReadWrite,
                        false,        3};
  dev.access = {{"devipc", std::string(105, 'h')}};
  t.regions = {host, dev};
  Result<RegionTable> back = DecodeTable(EncodeTable(t));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->regions.size(), 2u);
  EXPECT_EQ(back->regions[0].info.device, -1);
  EXPECT_TRUE(back->regions[0].access.empty());
  EXPECT_EQ(back->regions[1].info.kind, MemoryKind::kDevice);
  EXPECT_EQ(back->regions[1].info.device, 3);
  EXPECT_EQ(back->regions[1].access, dev.access);
}

// A peer's table is input: host memory naming a device, device memory
// naming none, a blob too large, two blobs of one transport, too many
// blobs, and a name outside [a-z0-9_-]{1,16} are malformed.
TEST(WireTest, MalformedRegionsAndBlobsAreRefused) {
  WireRegion host;
  host.info = RegionInfo{RegionKey{1}, 0x1000, 4096, MemoryKind::kHost, Access::kRemoteRead};
  using Mutate = void (*)(WireRegion&);
  const Mutate bad_edits[] = {
      [](WireRegion& r) { r.info.device = 0; },
      [](WireRegion& r) { r.info.kind = MemoryKind::kDevice; },
      [](WireRegion& r) {
        r.access = {{"shm", std::string(kMaxAccessBlob + 1, 'x')}};
      },
      [](WireRegion& r) {
        r.access = {{"shm", "a"}, {"shm", "b"}};
      },
      [](WireRegion& r) {
        for (int i = 0; i <= static_cast<int>(kMaxAccessBlobs); ++i) {
          r.access.push_back({"t" + std::to_string(i), "x"});
        }
      },
      [](WireRegion& r) {
        r.access = {{"", "x"}};
      },
      [](WireRegion& r) {
        r.access = {{"Shm", "x"}};
      },
      [](WireRegion& r) {
        r.access = {{"a/b", "x"}};
      },
      [](WireRegion& r) {
        r.access = {{std::string(kMaxTransportName + 1, 'a'), "x"}};
      },
  };
  for (Mutate bad : bad_edits) {
    RegionTable one;
    one.regions = {host};
    bad(one.regions[0]);
    EXPECT_EQ(DecodeTable(EncodeTable(one)).status().code(), StatusCode::kInvalidArgument);
  }
  RegionTable ok;
  ok.regions = {host};
  ok.regions[0].access = {{"shm", std::string(kMaxAccessBlob, 'x')}, {"a-b_9", ""}};
  EXPECT_TRUE(DecodeTable(EncodeTable(ok)).ok());
  HelloOk hello;
  hello.links = {{"ucx", std::string(kMaxLinkBlob + 1, 'a')}};
  EXPECT_EQ(DecodeHelloOk(EncodeHelloOk(hello)).status().code(), StatusCode::kInvalidArgument);
}

// One kernel (boot id) and one host id make a host; without a host id the
// pid namespace must match too.
TEST(WireTest, SameHostKeysOnBootIdHostIdAndPidNamespace) {
  HostInfo a;
  a.boot_id = "b1";
  a.pid_ns = 10;
  HostInfo b = a;
  EXPECT_TRUE(a.SameHostAs(b));
  b.pid_ns = 11;
  EXPECT_FALSE(a.SameHostAs(b)) << "another pid namespace, no host id";
  a.host_id = b.host_id = "node-a";
  EXPECT_TRUE(a.SameHostAs(b)) << "the deployment says one host";
  b.host_id = "node-b";
  b.pid_ns = a.pid_ns;
  EXPECT_FALSE(a.SameHostAs(b)) << "containers on one kernel told apart";
  b.host_id = "node-a";
  b.boot_id = "b2";
  EXPECT_FALSE(a.SameHostAs(b)) << "another kernel";
  a.boot_id = b.boot_id = "";
  EXPECT_FALSE(a.SameHostAs(b)) << "no boot id: never";
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

// Each proof depends on the secret, both nonces and every field of the
// body it covers (the host claims and region table included).
TEST(WireTest, HandshakeMacsCoverSecretNoncesAndBody) {
  std::array<std::uint8_t, kNonceBytes> n1{}, n2{};
  n2[0] = 1;
  ClientHello hello;
  hello.endpoint = "127.0.0.1:1";
  hello.host.pid = 42;
  EXPECT_TRUE(MacEquals(ClientHelloMac("", n1, hello), std::array<std::uint8_t, 32>{}));
  const auto c = ClientHelloMac("a", n1, hello);
  EXPECT_FALSE(MacEquals(c, ClientHelloMac("b", n1, hello)));
  EXPECT_FALSE(MacEquals(c, ClientHelloMac("a", n2, hello)));
  EXPECT_TRUE(MacEquals(c, ClientHelloMac("a", n1, hello)));
  ClientHello other = hello;
  other.host.pid = 43;
  EXPECT_FALSE(MacEquals(c, ClientHelloMac("a", n1, other)));
  other = hello;
  other.client_nonce[3] = 9;
  EXPECT_FALSE(MacEquals(c, ClientHelloMac("a", n1, other)));
  other = hello;
  other.mac[0] = 1;  // The MAC field itself is not covered.
  EXPECT_TRUE(MacEquals(c, ClientHelloMac("a", n1, other)));

  HelloOk ok;
  ok.host.boot_id = "b";
  ok.table.regions.push_back(WireRegion{});
  EXPECT_TRUE(MacEquals(HelloOkMac("", n1, n2, ok), std::array<std::uint8_t, 32>{}));
  const auto o = HelloOkMac("a", n1, n2, ok);
  EXPECT_FALSE(MacEquals(o, HelloOkMac("a", n2, n1, ok)));
  EXPECT_FALSE(MacEquals(o, HelloOkMac("b", n1, n2, ok)));
  HelloOk moved = ok;
  moved.table.regions[0].info.addr = 0x1000;
  EXPECT_FALSE(MacEquals(o, HelloOkMac("a", n1, n2, moved)));
  HelloOk reblobbed = ok;
  reblobbed.table.regions[0].access = {{"shm", "elsewhere"}};
  EXPECT_FALSE(MacEquals(o, HelloOkMac("a", n1, n2, reblobbed)));
  HelloOk relinked = ok;
  relinked.links = {{"ucx", "another worker"}};
  EXPECT_FALSE(MacEquals(o, HelloOkMac("a", n1, n2, relinked)));
  EXPECT_FALSE(MacEquals(o, ClientHelloMac("a", n1, hello)));
}

}  // namespace
}  // namespace sluice::internal
