// Starts a transfer engine and a store master through the installed
// library: "OK <engine endpoint> <master endpoint>".
#include <sluice/store/master.h>
#include <sluice/transfer/engine.h>

#include <iostream>

int main() {
  auto engine = sluice::TransferEngine::Create(sluice::EngineConfig{});
  if (!engine.ok()) {
    std::cerr << engine.status().ToString() << "\n";
    return 1;
  }
  auto master = sluice::MasterServer::Start(sluice::MasterConfig{});
  if (!master.ok()) {
    std::cerr << master.status().ToString() << "\n";
    return 1;
  }
  std::cout << "OK " << (*engine)->endpoint() << " " << (*master)->endpoint() << std::endl;
  return 0;
}
