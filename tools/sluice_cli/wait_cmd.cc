// `sluice wait URL`: polls an HTTP endpoint until it answers 200 (e.g. the
// orchestrator's /readyz once every stage has a worker), so scripts start
// clients only when the cluster serves.
#include <httplib.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <regex>
#include <thread>

#include "sluice_cli/commands.h"

namespace sluice::cli {
namespace {

struct WaitOptions {
  std::string url;
  std::string ca_file;  // https: the CA the server's certificate must chain to.
  double timeout_s = 60;
  double interval_s = 0.2;
};

int RunWait(const WaitOptions& o) {
  // http(s)://HOST:PORT/PATH, HOST a name, an IPv4 address or [IPv6].
  static const std::regex kUrl(
      R"((https?)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?(/\S*)?)");
  std::smatch m;
  if (!std::regex_match(o.url, m, kUrl)) {
    std::cerr << "sluice wait: '" << o.url
              << "' is not an http://HOST[:PORT][/PATH] or https://... URL\n";
    return 2;
  }
  httplib::Client http(m[1].str() + "://" + m[2].str() + m[3].str());
  if (m[1].str() == "https") {
    http.enable_server_certificate_verification(true);
    if (!o.ca_file.empty()) {
      http.set_ca_cert_path(o.ca_file);
    }
  }
  http.set_connection_timeout(1, 0);
  http.set_read_timeout(5, 0);
  const std::string path = m[4].matched ? m[4].str() : "/";
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(o.timeout_s);
  std::string last = "no answer";
  while (true) {
    if (auto r = http.Get(path)) {
      if (r->status == 200) {
        return 0;
      }
      last = "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 200);
    } else if (r.error() == httplib::Error::SSLServerVerification) {
      last = "the server's certificate is not trusted (--ca-file)";
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::cerr << "sluice wait: " << o.url << " not ready after " << o.timeout_s
                << " s (last: " << last << ")\n";
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
  }
}

}  // namespace

void AddWaitCommand(CLI::App& app, std::vector<Command>* out) {
  auto o = std::make_shared<WaitOptions>();
  CLI::App* cmd = app.add_subcommand(
      "wait", "wait until an HTTP endpoint answers 200, e.g. http://HOST:8000/readyz");
  cmd->add_option("url", o->url, "http://HOST[:PORT][/PATH] or https://...")->required();
  cmd->add_option("--ca-file", o->ca_file,
                  "with https: PEM CA the server's certificate must chain to (default: the "
                  "system's roots)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--timeout", o->timeout_s, "seconds before giving up (exit 1)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  cmd->add_option("--interval", o->interval_s, "seconds between tries")
      ->check(CLI::Range(0.01, 60.0))
      ->capture_default_str();
  out->push_back({cmd, [o] { return RunWait(*o); }});
}

}  // namespace sluice::cli
