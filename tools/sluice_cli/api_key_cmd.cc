// `sluice api-key hash --salt HEX`: an API key read from stdin, printed as
// the hashed entry an --api-keys file holds instead of the key
// ("hmac-sha256:HEX"), so the orchestrator's host keeps no usable key.
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include "sluice/orchestrator/server.h"

#include "sluice_cli/commands.h"

namespace sluice::cli {
namespace {

int RunHash(const std::string& salt_hex) {
  std::string salt;
  const bool hex = salt_hex.size() % 2 == 0 &&
                   salt_hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
  for (std::size_t i = 0; hex && i < salt_hex.size(); i += 2) {
    salt.push_back(static_cast<char>(std::stoi(salt_hex.substr(i, 2), nullptr, 16)));
  }
  if (salt.size() < 16 || salt.size() > 64) {
    std::cerr << "sluice api-key hash: --salt: 16..64 bytes in hex (the keys file's salt)\n";
    return 2;
  }
  std::string key((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const std::size_t end = key.find_last_not_of(" \t\r\n");
  key = end == std::string::npos ? std::string() : key.substr(0, end + 1);
  if (key.size() < 16 || key.find_first_of(" \t\r\n") != std::string::npos) {
    std::cerr << "sluice api-key hash: want one key of at least 16 characters on stdin\n";
    return 2;
  }
  std::cout << HashedApiKey(salt, key) << "\n";
  return 0;
}

}  // namespace

void AddApiKeyCommand(CLI::App& app, std::vector<Command>* out) {
  CLI::App* group = app.add_subcommand("api-key", "API keys for --api-keys files");
  group->require_subcommand(1);
  CLI::App* hash = group->add_subcommand(
      "hash",
      "print the hashed entry of the key on stdin (\"hmac-sha256:HEX\"), for a keys "
      "file with that salt");
  auto salt = std::make_shared<std::string>();
  hash->add_option("--salt", *salt, "the keys file's salt (hex)")->required();
  out->push_back({hash, [salt] { return RunHash(*salt); }});
}

}  // namespace sluice::cli
