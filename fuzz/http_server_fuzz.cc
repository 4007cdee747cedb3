// The orchestrator's HTTP API end to end, as a live connection sees it: one
// orchestrator in this process (API keys on, CORS on, no workers, so jobs
// queue, wait and get cancelled), and per input a fresh loopback connection
// that sends the input as is — one or several pipelined requests, cut
// anywhere — and reads what comes back until the server closes or goes
// quiet. Every byte reaches Beast's parser, the session, the router and
// the API's handlers and state. The server must survive every input and
// keep answering: every 64 inputs /healthz must answer 200. And no answer
// is a success for a caller without a key: an input that carries neither
// key, names none of the open routes (health, readiness, metrics,
// autoscale, CORS preflight) and hides nothing behind a %-escape must get
// no 2xx status line back.
// "Bearer sk-fuzz" is the key of tenant "fuzz" (the seeds carry it).
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/orchestrator/server.h"

#include "common/net.h"
#include "loopback.h"

namespace {

using namespace sluice;
using namespace sluice::internal;
using namespace std::chrono_literals;

struct Target {
  std::unique_ptr<OrchestratorServer> server;
  HostPort http;
};

Target* MakeTarget() {
  OrchestratorConfig c;
  c.max_queued_jobs = 64;
  c.max_finished_jobs = 64;
  c.sync_timeout = 100ms;  // A synchronous request with no workers answers 504 soon.
  c.ffmpeg = "";
  c.http.request_timeout = 1000ms;
  c.http.idle_timeout = 1000ms;
  c.http.sse_keepalive = 100ms;
  c.http.cors_origins = {"*"};
  c.access.keys = {{"sk-fuzz", "fuzz"}, {"sk-other", "other"}};
  c.access.tenants["fuzz"].max_jobs_in_flight = 32;
  auto s = OrchestratorServer::Start(c);
  auto hp = s.ok() ? ParseHostPort((*s)->http_endpoint(), false) : Result<HostPort>(s.status());
  if (!hp.ok()) {
    std::abort();
  }
  auto* t = new Target;  // Deleted at exit.
  t->server = std::move(*s);
  t->http = *hp;
  return t;
}

Target* target = nullptr;

// One connection: sends `bytes`, half-closes, reads the answer. A short
// `quiet_ms` leaves before slow answers (a synchronous request's 504):
// the server then meets a closed connection, a path worth fuzzing too.
std::string Exchange(std::string_view bytes, int quiet_ms) {
  auto c = ConnectTcp(target->http, 1000ms);
  if (!c.ok()) {
    std::abort();  // The server stopped accepting.
  }
  UniqueFd fd = std::move(*c);
  (void)SetNonBlocking(fd.get(), false);
  (void)SetIoTimeout(fd.get(), 200ms);
  (void)SendAll(fd.get(), bytes.data(), bytes.size());
  ::shutdown(fd.get(), SHUT_WR);
  return fuzz::DrainAnswer(fd.get(), quiet_ms);
}

bool Has(std::string_view hay, std::string_view needle) {
  return hay.find(needle) != std::string_view::npos;
}

// Whether `input` could earn a 2xx without holding a key (conservatively:
// any mention of a key or an open route, in any case, or an escape).
bool MayEarnSuccess(std::string_view input) {
  std::string lower(input);
  for (char& ch : lower) {
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  for (std::string_view open : {"sk-fuzz", "sk-other", "/health", "/readyz", "/metrics",
                                "/v1/autoscale", "options", "%", "http/1.1 2", "http/1.0 2"}) {
    if (Has(lower, open)) {
      return true;
    }
  }
  return false;
}

// Whether `answer` holds a 2xx status line (at its start or a line's).
bool HasSuccess(std::string_view answer) {
  for (std::string_view version : {"HTTP/1.1 2", "HTTP/1.0 2"}) {
    if (answer.rfind(version, 0) == 0 || Has(answer, "\n" + std::string(version))) {
      return true;
    }
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  target = MakeTarget();
  fuzz::DeleteAtExit(target);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::uint64_t inputs = 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string answer = Exchange(input, 5);
  if (!MayEarnSuccess(input) && HasSuccess(answer)) {
    std::abort();  // A success without a key.
  }
  if (++inputs % 64 == 0) {
    const std::string head = Exchange("GET /healthz HTTP/1.1\r\nHost: f\r\n\r\n", 1000);
    if (head.rfind("HTTP/1.1 200", 0) != 0) {
      std::abort();  // Still accepting, but no longer answering.
    }
  }
  return 0;
}
