#include "common/net.h"

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

TEST(ParseHostPortTest, AcceptsNamesV4AndBracketedV6) {
  Result<HostPort> a = ParseHostPort("127.0.0.1:8080", false);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8080);
  Result<HostPort> b = ParseHostPort("[::1]:0", true);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->ToString(), "[::1]:0");
}

TEST(ParseHostPortTest, RejectsMalformedInputNamingTheProblem) {
  EXPECT_EQ(ParseHostPort("localhost", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHostPort(":80", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHostPort("h:99999", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHostPort("h:12x", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHostPort("::1:80", false).status().code(), StatusCode::kInvalidArgument);
  Status zero = ParseHostPort("h:0", false).status();
  EXPECT_EQ(zero.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero.message().find("non-zero"), std::string_view::npos);
}

TEST(ListenTest, PortZeroPicksAPortAndConnectReachesIt) {
  std::uint16_t port = 0;
  Result<UniqueFd> l = Listen({"127.0.0.1", 0}, &port);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_NE(port, 0);
  Result<UniqueFd> c = ConnectTcp({"127.0.0.1", port}, std::chrono::milliseconds(1000));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

TEST(ListenTest, ConnectToClosedPortIsUnavailableWithEndpointScope) {
  std::uint16_t port = 0;
  { Result<UniqueFd> l = Listen({"127.0.0.1", 0}, &port); }  // Closed at once.
  Result<UniqueFd> c = ConnectTcp({"127.0.0.1", port}, std::chrono::milliseconds(1000));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(c.status().scope(), FailureScope::kEndpoint);
}

}  // namespace
}  // namespace sluice::internal

namespace sluice::internal {
namespace {

TEST(AdvertiseTest, AHostTakesTheBoundPortAndAPortIsKept) {
  const HostPort bound{"0.0.0.0", 7100};
  EXPECT_EQ(*AdvertisedEndpoint(bound, "10.0.0.2", "--advertise"), "10.0.0.2:7100");
  EXPECT_EQ(*AdvertisedEndpoint(bound, "node-b.example:9000", "--advertise"),
            "node-b.example:9000");
  EXPECT_EQ(*AdvertisedEndpoint(bound, "10.0.0.2:0", "--advertise"), "10.0.0.2:7100");
  EXPECT_EQ(*AdvertisedEndpoint(bound, "fd00::2", "--advertise"), "[fd00::2]:7100");
  EXPECT_EQ(*AdvertisedEndpoint(bound, "[fd00::2]", "--advertise"), "[fd00::2]:7100");
  EXPECT_EQ(*AdvertisedEndpoint(bound, "[fd00::2]:9000", "--advertise"), "[fd00::2]:9000");
  EXPECT_EQ(*AdvertisedEndpoint({"10.0.0.2", 7100}, "", "--advertise"), "10.0.0.2:7100");
  EXPECT_EQ(*AdvertisedEndpoint({"::1", 7100}, "", "--advertise"), "[::1]:7100");
}

TEST(AdvertiseTest, AWildcardIsNoAddressPeersCanDial) {
  for (const char* bad : {"0.0.0.0", "::", "[::]:80", "h:99999", "a b"}) {
    Result<std::string> r = AdvertisedEndpoint({"0.0.0.0", 7100}, bad, "--advertise");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--advertise"), std::string_view::npos);
  }
  for (const char* wildcard : {"0.0.0.0", "::"}) {
    Result<std::string> r = AdvertisedEndpoint({wildcard, 7100}, "", "--advertise");
    ASSERT_FALSE(r.ok()) << wildcard;
    EXPECT_NE(r.status().message().find("needs an address peers can dial"), std::string_view::npos);
  }
}

}  // namespace
}  // namespace sluice::internal
