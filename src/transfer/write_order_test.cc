#include "transfer/write_order.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

TEST(WriteOrderTest, NotifyWithNoWritesGoesAtOnce) {
  std::vector<std::string> sent;
  WriteOrder o([&](std::string&& m) { sent.push_back(m); });
  o.Notify("a");
  EXPECT_EQ(sent, std::vector<std::string>{"a"});
}

TEST(WriteOrderTest, NotifyWaitsForEarlierWritesOnly) {
  std::vector<std::string> sent;
  WriteOrder o([&](std::string&& m) { sent.push_back(m); });
  const auto w1 = o.BeginWrite();
  const auto w2 = o.BeginWrite();
  o.Notify("after-w1-w2");
  const auto w3 = o.BeginWrite();  // Later than the notify: must not hold it.
  o.Notify("after-w3");
  o.EndWrite(w2);
  EXPECT_TRUE(sent.empty());
  o.EndWrite(w1);
  EXPECT_EQ(sent, std::vector<std::string>{"after-w1-w2"});
  o.EndWrite(w3);
  EXPECT_EQ(sent, (std::vector<std::string>{"after-w1-w2", "after-w3"}));
}

TEST(WriteOrderTest, LaterEpochFinishingFirstStillWaitsForTheEarlierOne) {
  std::vector<std::string> sent;
  WriteOrder o([&](std::string&& m) { sent.push_back(m); });
  const auto w1 = o.BeginWrite();
  o.Notify("n1");
  const auto w2 = o.BeginWrite();
  o.Notify("n2");
  o.EndWrite(w2);
  EXPECT_TRUE(sent.empty()) << "n2 may not overtake n1";
  o.EndWrite(w1);
  EXPECT_EQ(sent, (std::vector<std::string>{"n1", "n2"}));
}

}  // namespace
}  // namespace sluice::internal
