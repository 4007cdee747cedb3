#include "sluice_cli/http_flags.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>

#include "sluice/adapters.h"
#include "sluice/security.h"
#include "sluice/units.h"

#include "sluice_cli/commands.h"

namespace sluice::cli {

std::function<void()> AddHttpFrontFlags(CLI::App* cmd, HttpFrontConfig* config) {
  struct Flags {
    std::string max_header = "16KiB", max_body = "16MiB";
    std::int64_t request_timeout_ms = 0, idle_timeout_ms = 0, sse_keepalive_ms = 0;
  };
  auto f = std::make_shared<Flags>();
  HttpFrontConfig& c = *config;
  f->request_timeout_ms = c.request_timeout.count();
  f->idle_timeout_ms = c.idle_timeout.count();
  f->sse_keepalive_ms = c.sse_keepalive.count();
  cmd->add_option("--http-threads", c.threads,
                  "HTTP I/O threads (waiting requests and event streams hold none)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--http-max-header", f->max_header, "request headers beyond this answer 431")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  cmd->add_option("--http-max-body", f->max_body,
                  "request bodies beyond this answer 413, before they are read")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  cmd->add_option("--http-max-json-depth", c.max_json_depth, "JSON bodies nested deeper answer 400")
      ->check(CLI::Range(std::size_t{2}, std::size_t{1000}))
      ->capture_default_str();
  cmd->add_option("--http-max-connections", c.max_connections,
                  "open connections beyond this are answered 503 and closed")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--http-request-timeout-ms", f->request_timeout_ms,
                  "a request not read whole this long after its first byte is dropped")
      ->check(CLI::Range(std::int64_t{100}, std::int64_t{3600000}))
      ->capture_default_str();
  cmd->add_option("--http-idle-timeout-ms", f->idle_timeout_ms,
                  "a connection without a request this long is closed")
      ->check(CLI::Range(std::int64_t{100}, std::int64_t{86400000}))
      ->capture_default_str();
  cmd->add_option("--sse-keepalive-ms", f->sse_keepalive_ms,
                  "a quiet event stream gets a keep-alive comment this often")
      ->check(CLI::Range(std::int64_t{10}, std::int64_t{3600000}))
      ->capture_default_str();
  cmd->add_option("--cors-origin", c.cors_origins,
                  "a browser origin allowed cross-origin, e.g. https://app.example "
                  "(repeatable; * for any; default: CORS off)");
  cmd->add_flag("--keep-abandoned-jobs", c.keep_abandoned_jobs,
                "a synchronous request's client that disconnects leaves its jobs running "
                "(default: they are cancelled)");
  return [f, config] {
    // The validators ran: both sizes parse.
    config->max_header_bytes = static_cast<std::size_t>(*ParseByteSize(f->max_header));
    config->max_body_bytes = static_cast<std::size_t>(*ParseByteSize(f->max_body));
    config->request_timeout = std::chrono::milliseconds(f->request_timeout_ms);
    config->idle_timeout = std::chrono::milliseconds(f->idle_timeout_ms);
    config->sse_keepalive = std::chrono::milliseconds(f->sse_keepalive_ms);
  };
}

void AddRequestLimitFlags(CLI::App* cmd, RequestLimits* limits) {
  cmd->add_option("--max-steps", limits->max_steps, "denoise steps a request may ask for")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--max-images", limits->max_images, "images per request (n)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-frames", limits->max_frames, "frames per video")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--max-pixel-frames", limits->max_pixel_frames,
                  "width x height x frames a request may ask for")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40))
      ->capture_default_str();
}

std::function<Status()> AddHttpTlsFlags(CLI::App* cmd, HttpFrontConfig* config) {
  struct Files {
    std::string cert, key;
  };
  auto f = std::make_shared<Files>();
  cmd->add_option("--http-tls-cert", f->cert,
                  "serve the HTTP API over HTTPS with this certificate chain (PEM)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--http-tls-key", f->key,
                  "the HTTPS certificate's private key (PEM, its owner's only)")
      ->check(CLI::ExistingFile);
  return [f, config]() -> Status {
    if (f->cert.empty() != f->key.empty()) {
      return InvalidArgumentError("http-tls-cert and --http-tls-key go together");
    }
    if (f->cert.empty()) {
      return Status::Ok();
    }
    SLUICE_RETURN_IF_ERROR(CheckSecretFile("--http-tls-key", f->key));
    auto read = [](const std::string& path, std::string* out) {
      std::ifstream in(path);
      out->assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      return out->find("-----BEGIN ") != std::string::npos;
    };
    if (!read(f->cert, &config->tls_cert_pem)) {
      return InvalidArgumentError("http-tls-cert " + f->cert + ": not a PEM file");
    }
    if (!read(f->key, &config->tls_key_pem)) {
      return InvalidArgumentError("http-tls-key " + f->key + ": not a PEM file");
    }
    return Status::Ok();
  };
}

std::function<Status()> AddApiKeysFlag(CLI::App* cmd, AccessConfig* access) {
  auto path = std::make_shared<std::string>();
  cmd->add_option("--api-keys", *path,
                  "YAML file of API keys -> tenants (and tenant limits); without it the API "
                  "is open")
      ->check(CLI::ExistingFile);
  return [path, access]() -> Status {
    if (path->empty()) {
      return Status::Ok();
    }
    SLUICE_ASSIGN_OR_RETURN(*access, AccessConfig::Load(*path));
    return CheckSecretFile("api-keys", *path);
  };
}

std::function<Status()> AddApiKeyFlags(CLI::App* cmd, std::string* key) {
  struct Flags {
    std::string file;
    std::string in_argv;
  };
  auto f = std::make_shared<Flags>();
  cmd->add_option("--api-key-file", f->file,
                  "file holding the API key sent as a bearer token, the owner's only (default: "
                  "$SLUICE_API_KEY)");
  cmd->add_option("--api-key", f->in_argv, "refused: use --api-key-file or $SLUICE_API_KEY");
  return [f, key]() -> Status {
    if (!f->in_argv.empty()) {
      return InvalidArgumentError(
          "api-key: a key on the command line is visible to every user of the host; use "
          "--api-key-file FILE or $SLUICE_API_KEY");
    }
    if (!f->file.empty()) {
      SLUICE_RETURN_IF_ERROR(CheckSecretFile("--api-key-file", f->file));
      std::ifstream in(f->file);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const std::size_t b = text.find_first_not_of(" \t\r\n");
      const std::size_t e = text.find_last_not_of(" \t\r\n");
      *key = b == std::string::npos ? std::string() : text.substr(b, e - b + 1);
      if (key->empty() || key->size() > 4096 ||
          key->find_first_of(" \t\r\n") != std::string::npos) {
        return InvalidArgumentError("api-key-file " + f->file +
                                    ": want one key of 1..4096 bytes without spaces");
      }
      return Status::Ok();
    }
    const char* env = std::getenv("SLUICE_API_KEY");
    *key = env == nullptr ? std::string() : std::string(env);
    return Status::Ok();
  };
}

std::function<Status()> AddLoraFlag(CLI::App* cmd,
                                    std::vector<std::pair<std::string, double>>* lora) {
  auto texts = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--lora", *texts,
                  "NAME or NAME:SCALE: run with this LoRA adapter (repeatable; GET /v1/adapters "
                  "lists them; scale -4..4, default 1)");
  return [texts, lora]() -> Status {
    for (const std::string& text : *texts) {
      const auto colon = text.rfind(':');
      std::pair<std::string, double> one{text.substr(0, colon), 1.0};
      if (colon != std::string::npos) {
        const std::string scale = text.substr(colon + 1);
        char* end = nullptr;
        one.second = std::strtod(scale.c_str(), &end);
        if (scale.empty() || end != scale.c_str() + scale.size() ||
            !(one.second >= -kMaxAdapterScale) || !(one.second <= kMaxAdapterScale)) {
          return InvalidArgumentError("lora: \"" + text + "\": the scale is a number in -4..4");
        }
      }
      if (!ValidAdapterName(one.first)) {
        return InvalidArgumentError("lora: \"" + text + "\": NAME or NAME:SCALE");
      }
      lora->push_back(std::move(one));
    }
    return Status::Ok();
  };
}

}  // namespace sluice::cli
