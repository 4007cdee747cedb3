// The cluster credential and TLS flags every role takes: --cluster-token
// (or --role-credential), --tls-cert, --tls-key, --tls-ca (each falling back to its SLUICE_*
// environment variable, see sluice/security.h) and --insecure.
#ifndef SLUICE_TOOLS_SECURITY_FLAGS_H_
#define SLUICE_TOOLS_SECURITY_FLAGS_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sluice/security.h"

namespace sluice::cli {

// Declares the flags on `cmd`. The returned function, called after parsing
// with the role's name, the endpoints it listens on and whether they are
// gRPC faces, loads the files and checks the endpoints (CheckListenSecurity:
// an open cluster only on loopback, a gRPC face beyond it with TLS, unless
// --insecure; a gRPC face needs the token, not a role credential); on an error it prints it,
// prefixed by the role, and returns nullopt.
using SecurityResolver = std::function<std::optional<SecurityConfig>(
    const std::string& role, const std::vector<std::string>& listens, bool grpc)>;
SecurityResolver AddSecurityFlags(CLI::App* cmd);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SECURITY_FLAGS_H_
