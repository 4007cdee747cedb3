#include "bench/http_bench.h"

#include <atomic>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "http/raw_client.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;
using http::raw::Conn;
using nlohmann::json;

std::string Get(const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: b\r\n\r\n";
}
std::string PostImages(const std::string& body) {
  return "POST /v1/images/generations HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// VmRSS of `pid` in bytes; 0 if unreadable.
double RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stod(line.substr(6)) * 1024;
    }
  }
  return 0;
}

// `n` /healthz probes on one keep-alive connection: p50 and p99 in ms.
Result<std::pair<double, double>> Probe(const std::string& ep, int n) {
  Conn c(ep);
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    if (!c.Send(Get("/healthz")) || c.Read().status != 200) {
      return UnavailableError("a /healthz probe got no answer", FailureScope::kEndpoint);
    }
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return std::make_pair(Percentile(ms, 0.5), Percentile(ms, 0.99));
}

// Opens `n` connections, each sending `request` (if any), unread.
Result<std::vector<std::unique_ptr<Conn>>> Open(const std::string& ep, int n,
                                                const std::string& request) {
  std::vector<std::unique_ptr<Conn>> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(std::make_unique<Conn>(ep, std::chrono::seconds(30)));
    if (!out.back()->connected() || (!request.empty() && !out.back()->Send(request))) {
      return UnavailableError("connection " + std::to_string(i) + " of " + std::to_string(n) +
                                  " failed (descriptor limit?)",
                              FailureScope::kEndpoint);
    }
  }
  return out;
}

}  // namespace

Result<HttpBenchResult> RunHttpBench(const HttpBenchOptions& o, const std::string& self) {
  if (o.connections < 0 || o.sse < 0 || o.sync < 0 || o.probes < 10 || o.submit_threads < 1 ||
      o.submit_seconds <= 0) {
    return InvalidArgumentError(
        "bench http: connections, sse, sync >= 0; probes >= 10; submit threads >= 1");
  }
  const int total = o.connections + o.sse + o.sync + o.submit_threads + 16;
  SLUICE_ASSIGN_OR_RETURN(
      auto server,
      BenchChild::Spawn({self, "serve", "--stages", o.stages, "--time-factor", "1", "--http",
                         "127.0.0.1:0", "--max-queued-jobs", "1000000", "--http-max-connections",
                         std::to_string(total), "--exit-on-stdin-eof"}));
  std::string ep = server->Word(1);
  if (ep.rfind("http://", 0) == 0) {
    ep = ep.substr(7);
  }
  HttpBenchResult r;
  r.options = o;
  SLUICE_ASSIGN_OR_RETURN(auto unloaded, Probe(ep, o.probes));
  r.healthz_p50_ms_unloaded = unloaded.first;
  r.healthz_p99_ms_unloaded = unloaded.second;

  const double rss0 = RssBytes(server->pid());
  SLUICE_ASSIGN_OR_RETURN(auto idle, Open(ep, o.connections, ""));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // Accepted, sessions made.
  if (o.connections > 0) {
    r.idle_rss_bytes_per_connection = (RssBytes(server->pid()) - rss0) / o.connections;
  }
  // A long job (200 steps at full profile timing, ~30 s) the streams watch.
  Conn submit(ep);
  if (!submit.Send(PostImages(R"({"prompt":"watched","steps":200,"async":true})"))) {
    return UnavailableError("cannot submit the watched job", FailureScope::kEndpoint);
  }
  const http::raw::Reply watched = submit.Read();
  const json wj = json::parse(watched.body, nullptr, false);
  if (watched.status != 202 || !wj.is_object() || !wj.contains("id")) {
    return UnavailableError("the watched job was not accepted: " + watched.body,
                            FailureScope::kEndpoint);
  }
  const std::string id = wj["id"];
  SLUICE_ASSIGN_OR_RETURN(auto streams, Open(ep, o.sse, Get("/v1/jobs/" + id + "/events")));
  SLUICE_ASSIGN_OR_RETURN(auto waiting,
                          Open(ep, o.sync, PostImages(R"({"prompt":"waiting","steps":200})")));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  r.rss_delta_mib_loaded = (RssBytes(server->pid()) - rss0) / (1 << 20);
  SLUICE_ASSIGN_OR_RETURN(auto loaded, Probe(ep, o.probes));
  r.healthz_p50_ms = loaded.first;
  r.healthz_p99_ms = loaded.second;
  r.healthz_p99_ratio = r.healthz_p99_ms / std::max(1e-3, r.healthz_p99_ms_unloaded);

  std::atomic<long> accepted{0}, rejected{0}, errors{0};
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(o.submit_seconds));
  std::vector<std::thread> threads;
  for (int t = 0; t < o.submit_threads; ++t) {
    threads.emplace_back([&, t] {
      Conn c(ep);
      for (int i = 0; Clock::now() < until; ++i) {
        const std::string body = R"({"prompt":"load )" + std::to_string(t) + "-" +
                                 std::to_string(i) + R"(","steps":1,"async":true})";
        if (!c.Send(PostImages(body))) {
          ++errors;
          return;
        }
        const int status = c.Read().status;
        (status == 202 ? accepted : status == 429 ? rejected : errors)++;
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  r.accepted = accepted;
  r.rejected = rejected;
  r.errors = errors;
  r.submissions_per_s = static_cast<double>(accepted + rejected) / o.submit_seconds;
  return r;
}

std::string ToJson(const HttpBenchResult& r) {
  const HttpBenchOptions& o = r.options;
  return json{{"connections", o.connections},
              {"sse", o.sse},
              {"sync", o.sync},
              {"stages", o.stages},
              {"idle_rss_bytes_per_connection", r.idle_rss_bytes_per_connection},
              {"rss_delta_mib_loaded", r.rss_delta_mib_loaded},
              {"healthz_p50_ms_unloaded", r.healthz_p50_ms_unloaded},
              {"healthz_p99_ms_unloaded", r.healthz_p99_ms_unloaded},
              {"healthz_p50_ms", r.healthz_p50_ms},
              {"healthz_p99_ms", r.healthz_p99_ms},
              {"healthz_p99_ratio", r.healthz_p99_ratio},
              {"submissions_per_s", r.submissions_per_s},
              {"accepted", r.accepted},
              {"rejected", r.rejected},
              {"errors", r.errors}}
      .dump();
}

}  // namespace sluice::bench
