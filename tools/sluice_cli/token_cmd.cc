// `sluice token derive --role ROLE --cluster-token FILE --out FILE`: the
// credential of one role (node, worker, client), written to a new file
// only its owner can read. A host given it instead of the token holds only
// that role's keys: its gRPC calls open only its role's methods.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "sluice/security.h"

#include "sluice_cli/commands.h"

namespace sluice::cli {
namespace {

struct DeriveFlags {
  std::string role;
  std::string token_file;
  std::string out;
};

int RunDerive(const DeriveFlags& f) {
  SecurityFiles files;
  files.token_file = f.token_file;
  Result<SecurityConfig> s = LoadSecurity(files);
  if (!s.ok()) {
    std::cerr << "sluice token derive: " << s.status().message() << "\n";
    return 2;
  }
  if (s->token.empty()) {
    std::cerr << "sluice token derive: give --cluster-token FILE (or SLUICE_CLUSTER_TOKEN_FILE): "
                 "the credential derives from the token\n";
    return 2;
  }
  Result<std::string> text = RoleCredentialText(s->token, f.role);
  if (!text.ok()) {
    std::cerr << "sluice token derive: --role: " << text.status().message() << "\n";
    return 2;
  }
  // A new file, its owner's only from the start; never over another.
  const int fd = ::open(f.out.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::cerr << "sluice token derive: --out " << f.out << ": " << std::strerror(errno)
              << (errno == EEXIST ? " (it is not overwritten)" : "") << "\n";
    return 1;
  }
  const bool ok = ::write(fd, text->data(), text->size()) == static_cast<ssize_t>(text->size());
  if (::close(fd) != 0 || !ok) {
    std::cerr << "sluice token derive: --out " << f.out << ": write failed\n";
    ::unlink(f.out.c_str());
    return 1;
  }
  std::cout << "wrote the " << f.role << " credential to " << f.out
            << " (give it as --role-credential)\n";
  return 0;
}

}  // namespace

void AddTokenCommand(CLI::App& app, std::vector<Command>* out) {
  CLI::App* group = app.add_subcommand("token", "the cluster token and role credentials");
  group->require_subcommand(1);
  CLI::App* derive = group->add_subcommand(
      "derive",
      "write the credential of one role (node, worker, client): keys derived from the cluster "
      "token that open only that role's calls, for hosts that should not hold the token");
  auto f = std::make_shared<DeriveFlags>();
  derive->add_option("--role", f->role, "node, worker or client")->required();
  derive->add_option("--cluster-token", f->token_file,
                     "the cluster token's file (default: $SLUICE_CLUSTER_TOKEN_FILE)");
  derive->add_option("--out", f->out, "the credential file to create (mode 0600)")->required();
  out->push_back({derive, [f] { return RunDerive(*f); }});
}

}  // namespace sluice::cli
