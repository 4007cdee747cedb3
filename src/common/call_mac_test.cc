// Call proofs: a proof passes once, for its method, within its window, and
// under its key; anything else is refused naming why.
#include "common/call_mac.h"

#include <string>

#include <gtest/gtest.h>

namespace sluice::internal {
namespace {

using namespace std::chrono_literals;

constexpr std::int64_t kNow = 1'780'000'000'000;  // A fixed clock.
const std::string kKey = "a7c3e0f1b2d4a7c3e0f1b2d4a7c3e0f1b2d4a7c3e0f1b2d4a7c3e0f1b2d4a7c3";
const std::string kMethod = "/sluice.orchestrator.v1.Orchestrator/Register";

std::string Why(const Status& s) {
  return std::string(s.message());
}

TEST(CallMacTest, AProofPassesOnceForItsMethodWithinItsWindowUnderItsKey) {
  CallVerifier v(kKey, 60s, 1000);
  const std::string proof = SignCall(kKey, kMethod, kNow);
  EXPECT_EQ(proof.find(kKey), std::string::npos) << "the key never travels";
  ASSERT_TRUE(v.Verify(kMethod, proof, kNow + 5000).ok());
  const Status again = v.Verify(kMethod, proof, kNow + 6000);
  EXPECT_EQ(again.code(), StatusCode::kUnauthenticated);
  EXPECT_NE(Why(again).find("replayed"), std::string::npos) << Why(again);

  EXPECT_NE(Why(v.Verify("/sluice.orchestrator.v1.Orchestrator/Done", SignCall(kKey, kMethod, kNow),
                         kNow))
                .find("wrong cluster credential"),
            std::string::npos)
      << "a proof for one method opens no other";
  EXPECT_NE(Why(v.Verify(kMethod, SignCall(std::string(64, 'f'), kMethod, kNow), kNow))
                .find("wrong cluster credential"),
            std::string::npos);
  EXPECT_NE(Why(v.Verify(kMethod, SignCall(kKey, kMethod, kNow - 61'000), kNow)).find("window"),
            std::string::npos)
      << "stale";
  EXPECT_NE(Why(v.Verify(kMethod, SignCall(kKey, kMethod, kNow + 61'000), kNow)).find("window"),
            std::string::npos)
      << "from the future";
  EXPECT_TRUE(v.Verify(kMethod, SignCall(kKey, kMethod, kNow - 59'000), kNow).ok());
  EXPECT_EQ(v.forgotten_early(), 0u);
}

TEST(CallMacTest, MalformedProofsAreRefused) {
  CallVerifier v(kKey, 60s, 1000);
  const std::string good = SignCall(kKey, kMethod, kNow);
  const std::size_t dot1 = good.find('.'), dot2 = good.find('.', dot1 + 1);
  for (const std::string& bad :
       {std::string(), std::string("x"), std::string(".."), good.substr(0, dot2),
        "12a" + good.substr(dot1), good.substr(0, dot1 + 1) + "ZZ" + good.substr(dot1 + 3),
        good.substr(0, good.size() - 1), good + "0", "-" + good.substr(dot1)}) {
    const Status s = v.Verify(kMethod, bad, kNow);
    EXPECT_EQ(s.code(), StatusCode::kUnauthenticated) << bad;
    EXPECT_FALSE(s.ok()) << bad;
  }
  EXPECT_TRUE(v.Verify(kMethod, good, kNow).ok()) << "the refusals remembered nothing";
}

TEST(CallMacTest, RememberedNoncesAreBoundedAndExpire) {
  CallVerifier v(kKey, 60s, 3);
  std::vector<std::string> proofs;
  for (int i = 0; i < 5; ++i) {
    proofs.push_back(SignCall(kKey, kMethod, kNow));
    ASSERT_TRUE(v.Verify(kMethod, proofs.back(), kNow).ok());
  }
  EXPECT_EQ(v.forgotten_early(), 2u);
  EXPECT_FALSE(v.Verify(kMethod, proofs[4], kNow).ok()) << "the newest are remembered";
  // Past the window every proof is stale: forgetting it loses nothing.
  EXPECT_NE(Why(v.Verify(kMethod, proofs[0], kNow + 61'000)).find("window"), std::string::npos);
}

TEST(CallMacTest, OnlyVerifiedNoncesAreRemembered) {
  CallVerifier v(kKey, 60s, 1000);
  const std::string proof = SignCall(kKey, kMethod, kNow);
  const std::string_view nonce = ProofNonce(proof);
  ASSERT_EQ(nonce.size(), 32u);
  EXPECT_EQ(proof.substr(proof.find('.') + 1, 32), nonce);
  EXPECT_FALSE(v.Remembers(nonce)) << "not verified yet";
  const std::string forged = SignCall(std::string(64, 'f'), kMethod, kNow);
  EXPECT_FALSE(v.Verify(kMethod, forged, kNow).ok());
  EXPECT_FALSE(v.Remembers(ProofNonce(forged))) << "a refused proof is not remembered";
  ASSERT_TRUE(v.Verify(kMethod, proof, kNow).ok());
  EXPECT_TRUE(v.Remembers(nonce));
  EXPECT_EQ(ProofNonce("12.abc.def"), "");
  EXPECT_EQ(ProofNonce("no dots"), "");
}

}  // namespace
}  // namespace sluice::internal
