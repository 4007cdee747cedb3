// JSON logs: one object per line, the message escaped, the calling
// thread's fields (LogFields) beside it, innermost first, restored when a
// scope ends; unknown formats refused.
#include "sluice/logging.h"

#include <spdlog/sinks/ostream_sink.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/log.h"

namespace sluice::internal {
namespace {

using nlohmann::json;

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sink_ = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    Logger().sinks().push_back(sink_);
    ASSERT_TRUE(SetLogLevel("info").ok());
  }
  void TearDown() override {
    auto& sinks = Logger().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    EXPECT_TRUE(SetLogFormat("text").ok());
    EXPECT_TRUE(SetLogLevel("warn").ok());
  }
  // The lines written since the last call, each parsed.
  std::vector<json> Lines() {
    std::vector<json> lines;
    std::istringstream in(out_.str());
    out_.str("");
    for (std::string line; std::getline(in, line);) {
      lines.push_back(json::parse(line));  // Throws (fails the test) if not JSON.
    }
    return lines;
  }

  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

TEST_F(LoggingTest, JsonLinesCarryTheEscapedMessageAndTheThreadsFields) {
  ASSERT_TRUE(SetLogFormat("json").ok());
  SLUICE_LOG(warn, "plain");
  {
    const LogFields job{{"job", "job-1"}, {"stage", "denoise"}};
    SLUICE_LOG(info, "a \"quoted\" \\ line\nwith\ttabs and \x01");
    {
      const LogFields inner{{"stage", "decode"}, {"worker", "42"}};
      SLUICE_LOG(error, "inner");
    }
    SLUICE_LOG(info, "outer again");
  }
  SLUICE_LOG(debug, "below the level");
  std::thread([] { SLUICE_LOG(warn, "another thread"); }).join();
  const std::vector<json> lines = Lines();
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0]["msg"], "plain");
  EXPECT_EQ(lines[0]["level"], "warning");
  EXPECT_FALSE(lines[0].contains("job"));
  const std::string when = lines[0]["time"];
  ASSERT_EQ(when.size(), 24u) << when;  // 2026-12-06T19:23:28.811Z
  EXPECT_EQ(when[10], 'T');
  EXPECT_EQ(when[19], '.');
  EXPECT_EQ(when.back(), 'Z');
  EXPECT_EQ(lines[1]["msg"], "a \"quoted\" \\ line\nwith\ttabs and \x01");
  EXPECT_EQ(lines[1]["job"], "job-1");
  EXPECT_EQ(lines[1]["stage"], "denoise");
  EXPECT_EQ(lines[1]["level"], "info");
  EXPECT_EQ(lines[2]["stage"], "decode");  // The inner scope's.
  EXPECT_EQ(lines[2]["worker"], "42");
  EXPECT_EQ(lines[2]["job"], "job-1");
  EXPECT_EQ(lines[2].size(), 6u) << lines[2].dump();  // Each name once.
  EXPECT_EQ(lines[3]["stage"], "denoise");
  EXPECT_FALSE(lines[3].contains("worker"));
  EXPECT_EQ(lines[4]["msg"], "another thread");
  EXPECT_FALSE(lines[4].contains("job"));  // Fields are the thread's own.
  EXPECT_TRUE(LogFields::Current().empty());
}

TEST_F(LoggingTest, TextIsTheDefaultAndOtherFormatsAreRefused) {
  SLUICE_LOG(warn, "as text");
  EXPECT_NE(out_.str().find("[sluice] [warning] as text"), std::string::npos) << out_.str();
  const Status bad = SetLogFormat("xml");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("text or json"), std::string::npos);
  out_.str("");
  SLUICE_LOG(warn, "still text");
  EXPECT_EQ(out_.str().find('{'), std::string::npos) << out_.str();
}

}  // namespace
}  // namespace sluice::internal
