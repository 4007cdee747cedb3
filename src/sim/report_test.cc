#include "sim/report.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "common/subprocess.h"

namespace sluice::sim {
namespace {

namespace fs = std::filesystem;

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("sim-report-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Config(const std::string& yaml) {
    const std::string path = (dir_ / "config.yaml").string();
    std::ofstream(path) << yaml;
    return path;
  }
  static std::string Read(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

  fs::path dir_;
};

// A small cluster whose demand split gives decode 2 GPUs of 32: one
// decode GPU alone cannot keep up at load 0.8.
constexpr char kSmall[] = R"(
title: small
hours: 0.05
series_interval_s: 30
models:
  - model: flux-1024
    priority: interactive
    gpus: 32
    load: 0.8
    loads: [0.5, 1.2]
    slo: {metric: ttff, p99_s: 8}
)";

TEST_F(ReportTest, WritesTablesDataAndPlotsForEachModel) {
  const std::string gnuplot = FindOnPath("gnuplot");
  ASSERT_FALSE(gnuplot.empty()) << "gnuplot is a test dependency (scripts/install-deps.sh)";
  Result<ReportConfig> c = ReadReportConfig(Config(kSmall));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const fs::path out = dir_ / "out";
  Result<ReportOutput> r = WriteReport(*c, out.string(), gnuplot);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->simulations, 6);
  for (const char* f : {"report.md", "report.gp", "flux-1024-cdf.png", "flux-1024-load.png",
                        "flux-1024-nm.png", "flux-1024-utilization.png"}) {
    ASSERT_TRUE(fs::exists(out / f)) << f;
  }
  EXPECT_EQ(Read(out / "flux-1024-nm.png").substr(1, 3), "PNG");
  const std::string md = Read(out / "report.md");
  for (const char* s : {"# small", "### Colocated against disaggregated at load 0.80",
                        "### Throughput against load", "### SLO attainment against N:M",
                        "The planner (`sluice plan`)", "![flux-1024: busy share"}) {
    EXPECT_NE(md.find(s), std::string::npos) << s;
  }
  // The N:M sweep: one decode GPU misses the SLO that the demand split
  // (two) meets.
  std::istringstream nm(Read(out / "flux-1024-nm.dat"));
  std::string line;
  std::map<int, double> within;
  while (std::getline(nm, line)) {
    if (line.empty() || line[0] == '#') {
      continue;
    }
    std::istringstream row(line);
    int decode = 0;
    double ratio = 0, share = 0;
    row >> decode >> ratio >> share;
    within[decode] = share;
  }
  ASSERT_TRUE(within.count(1) && within.count(2) && within.count(4));
  EXPECT_LT(within[1], 0.5);
  EXPECT_GT(within[2], 0.95);
  // The load sweep: past saturation (1.2) most jobs miss the SLO that
  // nearly all meet at 0.5 (the disaggregated share, the row's 5th cell).
  auto share_at = [&](const std::string& load) {
    const std::size_t row = md.find("| " + load + " |");
    EXPECT_NE(row, std::string::npos) << load;
    std::istringstream cells(md.substr(row, md.find('\n', row) - row));
    std::string cell;
    for (int i = 0; i < 6; ++i) {
      std::getline(cells, cell, '|');
    }
    return std::stod(cell);
  };
  EXPECT_GT(share_at("0.50"), 95);
  EXPECT_LT(share_at("1.20"), 50);
}

TEST_F(ReportTest, WithoutGnuplotItWritesEverythingButThePngs) {
  Result<ReportConfig> c = ReadReportConfig(Config(kSmall));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Result<ReportOutput> r = WriteReport(*c, (dir_ / "out").string(), "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(fs::exists(dir_ / "out" / "flux-1024-cdf.png"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "flux-1024-cdf.dat"));
  EXPECT_NE(Read(dir_ / "out" / "report.md").find("No gnuplot was found"), std::string::npos);
}

TEST_F(ReportTest, AConfigIsCheckedKeyByKey) {
  struct Case {
    const char* yaml;
    const char* error;
  };
  const Case cases[] = {
      {"models:\n  - {model: flux-1024, gpu: 8, slo: {p99_s: 6}}\n", "models[0].gpu: unknown key"},
      {"models:\n  - {model: flux-1024, slo: {metric: mean, p99_s: 6}}\n",
       "models[0].slo.metric: 'mean' is not latency or ttff"},
      {"models:\n  - {model: flux-1024}\n", "models[0].slo: required"},
      {"models:\n  - {model: flux-1024, gpus: many, slo: {p99_s: 6}}\n",
       "models[0].gpus: not a whole number"},
      {"models:\n  - {model: flux-1024, load: 3, slo: {p99_s: 6}}\n", "loads must be in (0, 2]"},
      {"models:\n  - {model: flux-1024, priority: urgent, slo: {p99_s: 6}}\n",
       "'urgent' is not interactive, standard or batch"},
      {"hours: 0\nmodels:\n  - {model: flux-1024, slo: {p99_s: 6}}\n", "hours: must be in"},
      {"gpu_memory_gb: 0\nmodels:\n  - {model: flux-1024, slo: {p99_s: 6}}\n",
       "gpu_memory_gb: must be in (0, 4096]"},
      {"title: t\n", "models: required"},
      {"models: [\n", "config.yaml"},
  };
  for (const Case& k : cases) {
    Result<ReportConfig> c = ReadReportConfig(Config(k.yaml));
    ASSERT_FALSE(c.ok()) << k.yaml;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << k.yaml;
    EXPECT_NE(c.status().message().find(k.error), std::string::npos) << c.status().message();
  }
  EXPECT_EQ(ReadReportConfig((dir_ / "none.yaml").string()).status().code(), StatusCode::kNotFound);
  // An unknown model is refused when the report runs, by name.
  Result<ReportConfig> c =
      ReadReportConfig(Config("models:\n  - {model: sdxl, slo: {p99_s: 6}}\n"));
  ASSERT_TRUE(c.ok());
  Result<ReportOutput> r = WriteReport(*c, (dir_ / "out").string(), "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sdxl"), std::string::npos);
}

}  // namespace
}  // namespace sluice::sim
