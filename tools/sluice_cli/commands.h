// The `sluice` subcommands, declared per group: each Add* function declares
// its subcommands' options on `app` and appends what to run when one of
// them is chosen. Options live in objects the runners own, so they outlive
// the parse.
#ifndef SLUICE_TOOLS_COMMANDS_H_
#define SLUICE_TOOLS_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace sluice::cli {

struct Command {
  CLI::App* app;             // The subcommand; chosen when `*app` is true after parsing.
  std::function<int()> run;  // Returns the process exit code.
};

// master, store-node, orchestrator, worker (roles_cmd.cc).
void AddRoleCommands(CLI::App& app, std::vector<Command>* out);
// serve, generate (serve_cmd.cc).
void AddServeCommands(CLI::App& app, std::vector<Command>* out);
// eval: the reference model's prompt adherence, scored (eval_cmd.cc).
void AddEvalCommand(CLI::App& app, std::vector<Command>* out);
// api-key hash: an API key's hashed entry for a keys file (api_key_cmd.cc).
void AddApiKeyCommand(CLI::App& app, std::vector<Command>* out);
// etcd-auth: etcd users per role for a cluster (etcd_auth_cmd.cc).
void AddEtcdAuthCommand(CLI::App& app, std::vector<Command>* out);
// token derive: a role credential from the cluster token (token_cmd.cc).
void AddTokenCommand(CLI::App& app, std::vector<Command>* out);
// wait URL (wait_cmd.cc).
void AddWaitCommand(CLI::App& app, std::vector<Command>* out);
// sim and plan (sim_cmd.cc): the cluster simulator on a built-in
// workload, and pool sizes for an SLO from it.
void AddSimCommand(CLI::App& app, std::vector<Command>* out);
// bench transfer|store|connector|e2e|orchestrator and the internal
// transfer-target (bench_cmd.cc).
void AddBenchCommands(CLI::App& bench, std::vector<Command>* out);
// bench e2e and bench sharing: embedded deployments serving profile
// stages, and their replays in the simulator (bench_e2e_cmd.cc).
void AddE2eCommands(CLI::App& bench, std::vector<Command>* out);

// CLI11 validator for byte sizes ("16MiB").
struct ByteSizeValidator : CLI::Validator {
  ByteSizeValidator();
};

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_COMMANDS_H_
