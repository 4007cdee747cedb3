// The `sluice` command: one binary, one subcommand per role or tool. The
// subcommands live in roles_cmd.cc, serve_cmd.cc and bench_cmd.cc.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "sluice/logging.h"
#include "sluice/units.h"

#include "sluice_cli/commands.h"
#include "sluice_cli/config.h"

namespace sluice::cli {

ByteSizeValidator::ByteSizeValidator() {
  name_ = "SIZE";
  func_ = [](std::string& s) -> std::string {
    auto r = ParseByteSize(s);
    return r.ok() ? std::string() : std::string(r.status().message());
  };
}

}  // namespace sluice::cli

namespace {

// Servers hold a descriptor per client connection: take the hard limit.
void RaiseDescriptorLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  RaiseDescriptorLimit();
  // `ROLE --config FILE`: the file's section for the role becomes flags.
  auto expanded = sluice::cli::ExpandConfig(
      std::vector<std::string>(argv + 1, argv + argc),
      {"serve", "master", "store-node", "orchestrator", "worker", "generate"});
  if (!expanded.ok()) {
    std::cerr << "sluice: " << expanded.status().message() << "\n";
    return 2;
  }
  std::vector<char*> expanded_argv = {argv[0]};
  for (std::string& a : *expanded) {
    expanded_argv.push_back(a.data());
  }
  argc = static_cast<int>(expanded_argv.size());
  argv = expanded_argv.data();

  CLI::App app{"sluice: disaggregated diffusion serving (encode / denoise / decode)"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  std::string log_format = "text";
  app.add_option("--log-format", log_format,
                 "text, or json: a JSON object per line with the job, stage and worker a line "
                 "is about")
      ->capture_default_str();
  app.add_subcommand("version", "print the version")->callback([] {
    std::cout << "sluice 0.1.0\n";
  });
  CLI::App* bench = app.add_subcommand("bench", "benchmarks that print figures");
  bench->require_subcommand(1);

  std::vector<sluice::cli::Command> commands;
  sluice::cli::AddRoleCommands(app, &commands);
  sluice::cli::AddServeCommands(app, &commands);
  sluice::cli::AddWaitCommand(app, &commands);
  sluice::cli::AddApiKeyCommand(app, &commands);
  sluice::cli::AddTokenCommand(app, &commands);
  sluice::cli::AddEtcdAuthCommand(app, &commands);
  sluice::cli::AddEvalCommand(app, &commands);
  sluice::cli::AddSimCommand(app, &commands);
  sluice::cli::AddBenchCommands(*bench, &commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and version print and exit 0; every usage error (an unknown
    // flag, a missing or malformed value) exits 2, as the commands' own
    // refusals do.
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (sluice::Status s = sluice::SetLogLevel(log_level); !s.ok()) {
    std::cerr << "sluice: --log-level: " << s.message() << "\n";
    return 2;
  }
  if (sluice::Status s = sluice::SetLogFormat(log_format); !s.ok()) {
    std::cerr << "sluice: --log-format: " << s.message() << "\n";
    return 2;
  }
  for (const sluice::cli::Command& c : commands) {
    if (*c.app) {
      return c.run();
    }
  }
  return 0;
}
