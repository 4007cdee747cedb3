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
