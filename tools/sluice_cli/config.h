// YAML configuration for the `sluice` command: `sluice ROLE --config FILE`
// reads the file's section named after the role (serve, master,
// store-node, orchestrator, worker, generate) and adds its keys as the long
// flags of the same names, unless the command line gives them itself
// (flags win). One file can describe a whole cluster:
//
//   master:       {listen: "10.0.0.1:7000", metrics-port: 9100}
//   store-node:   {master: "10.0.0.1:7000", memory: 64GiB}
//   orchestrator: {listen: "10.0.0.1:7200", http: "0.0.0.0:8000",
//                  store-master: "10.0.0.1:7000"}
//   worker:       {orchestrator: "10.0.0.1:7200", master: "10.0.0.1:7000"}
//
// Values are scalars (`true` adds a flag, `false` omits it) or lists of
// scalars (the flag repeated).
#ifndef SLUICE_TOOLS_CONFIG_H_
#define SLUICE_TOOLS_CONFIG_H_

#include <set>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::cli {

// `args` (argv[1..]) with every `--config FILE` replaced by the flags of
// FILE's section for the role: the first of `args` found in `roles`.
// Errors: kInvalidArgument naming the file and the problem (unreadable, not
// YAML, no such section, a value of the wrong shape), or --config without
// a role.
Result<std::vector<std::string>> ExpandConfig(const std::vector<std::string>& args,
                                              const std::set<std::string>& roles);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_CONFIG_H_
