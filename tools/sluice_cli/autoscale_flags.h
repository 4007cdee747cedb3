// The autoscale flags shared by `sluice orchestrator` (what it recommends
// at GET /v1/autoscale) and `sluice serve` (with --elastic, what it
// applies to its own pools).
#ifndef SLUICE_TOOLS_SLUICE_CLI_AUTOSCALE_FLAGS_H_
#define SLUICE_TOOLS_SLUICE_CLI_AUTOSCALE_FLAGS_H_

#include <CLI/CLI.hpp>
#include <functional>

#include "sluice/orchestrator/autoscale.h"

namespace sluice::cli {

// Adds --autoscale-target, --autoscale-down-below, --autoscale-window,
// --autoscale-up-cooldown, --autoscale-down-cooldown (seconds) and
// --autoscale-min/--autoscale-max (workers per pool). The returned
// function, called after parsing, writes them into `*o` (which must
// outlive the command).
std::function<void()> AddAutoscaleFlags(CLI::App* cmd, AutoscaleOptions* o);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_CLI_AUTOSCALE_FLAGS_H_
