// The HTTP server on loopback, driven by raw sockets so each limit, timeout
// and disconnect is exercised byte by byte.
#include "http/server.h"

#include <httplib.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/testing/eventually.h"
#include "common/testing/test_pki.h"
#include "http/raw_client.h"

namespace sluice::http {
namespace {

using namespace std::chrono_literals;
using raw::Conn;
using raw::Reply;
using sluice::internal::Eventually;

std::string Get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n";
}

nlohmann::json Json(const std::string& body) {
  return nlohmann::json::parse(body, nullptr, false);
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions o = {}) {
    Router r;
    r.Add("GET", "/hello", [](Request&, std::shared_ptr<Exchange> ex) {
      Response res;
      res.content_type = "text/plain";
      res.body = "hi";
      ex->Respond(std::move(res));
    });
    r.Add("GET", "/echo/{a}/{b}", [](Request& req, std::shared_ptr<Exchange> ex) {
      Response res;
      res.body =
          nlohmann::json{
              {"a", req.params[0]}, {"b", req.params[1]}, {"q", req.Query("q").value_or("-")}}
              .dump();
      ex->Respond(std::move(res));
    });
    r.Add("POST", "/echo", [](Request& req, std::shared_ptr<Exchange> ex) {
      Response res;
      res.body = req.body;
      ex->Respond(std::move(res));
    });
    // Answers after ?ms=N, from a timer: a waiting request costs no thread.
    r.Add("GET", "/wait", [](Request& req, std::shared_ptr<Exchange> ex) {
      const int ms = std::stoi(req.Query("ms").value_or("100"));
      ex->After(std::chrono::milliseconds(ms), [ex] {
        Response res;
        res.body = "waited";
        ex->Respond(std::move(res));
      });
    });
    // Never answers; counts clients that left while waiting.
    r.Add("GET", "/hang",
          [this](Request&, std::shared_ptr<Exchange> ex) { ex->OnClose([this] { ++left_; }); });
    r.Add("GET", "/stream", [](Request&, std::shared_ptr<Exchange> ex) {
      ex->StartStream(200, "text/event-stream", {}, ": ka\n\n");
      ex->Send("data: 1\n\n");
      ex->After(600ms, [ex] {
        ex->Send("data: 2\n\n");
        ex->End();
      });
    });
    // A library call that throws (nlohmann on invalid UTF-8).
    r.Add("GET", "/throws", [](Request&, std::shared_ptr<Exchange>) {
      (void)nlohmann::json(std::string("\xff")).dump();
    });
    // 16 MiB at once to a client that never reads: the write stalls.
    r.Add("GET", "/flood", [this](Request&, std::shared_ptr<Exchange> ex) {
      ex->OnClose([this] { ++left_; });
      ex->StartStream(200, "application/octet-stream", {}, "");
      for (int i = 0; i < 64; ++i) {
        ex->Send(std::string(256 << 10, 'f'));
      }
    });
    r.Add("GET", "/blocking", [](Request&, std::shared_ptr<Exchange> ex) {
      ex->RunBlocking([ex] {
        std::this_thread::sleep_for(50ms);
        Response res;
        res.body = "slow";
        ex->Respond(std::move(res));
      });
    });
    // Gated on an "X-Key: k" header, checked before the body is read.
    r.Add(
        "POST", "/gated",
        [this](Request& req, std::shared_ptr<Exchange> ex) {
          ++gated_bodies_;
          Response res;
          res.body = req.body;
          ex->Respond(std::move(res));
        },
        [](const Request& head) -> std::optional<Response> {
          if (head.Header("x-key") == "k" && head.path == "/gated" && head.body.empty()) {
            return std::nullopt;
          }
          return ErrorResponse(401, "invalid_request_error", "no key", {}, "invalid_api_key");
        });
    auto s = Server::Start(o, std::move(r));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
  }
  const std::string& ep() const { return server_->endpoint(); }

  std::atomic<int> left_{0};
  std::atomic<int> gated_bodies_{0};
  std::unique_ptr<Server> server_;
};

TEST_F(HttpServerTest, RoutesParamsQueriesAndKeepAlive) {
  StartServer();
  Conn c(ep());
  ASSERT_TRUE(c.Send(Get("/hello")));
  Reply r = c.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hi");
  // Same connection, then two pipelined requests.
  ASSERT_TRUE(c.Send(Get("/echo/x/y?q=a%20b+c")));
  r = c.Read();
  EXPECT_EQ(Json(r.body), (nlohmann::json{{"a", "x"}, {"b", "y"}, {"q", "a b c"}}));
  ASSERT_TRUE(
      c.Send(Get("/hello") + "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"));
  EXPECT_EQ(c.Read().body, "hi");
  EXPECT_EQ(c.Read().body, "abc");
}

TEST_F(HttpServerTest, UnknownRoutesAndMethodsAnswerOpenAiErrors) {
  StartServer();
  Conn c(ep());
  ASSERT_TRUE(c.Send(Get("/nope")));
  Reply r = c.Read();
  EXPECT_EQ(r.status, 404);
  nlohmann::json j = Json(r.body);
  EXPECT_EQ(j["error"]["code"], "not_found");
  EXPECT_TRUE(j["error"].contains("param"));
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  ASSERT_TRUE(c.Send("DELETE /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
  r = c.Read();
  EXPECT_EQ(r.status, 405);
  EXPECT_NE(r.head.find("Allow: GET"), std::string::npos);
  EXPECT_EQ(Json(r.body)["error"]["code"], "method_not_allowed");
  ASSERT_TRUE(c.Send("OPTIONS /echo HTTP/1.1\r\nHost: t\r\n\r\n"));
  r = c.Read();
  EXPECT_EQ(r.status, 204);
  EXPECT_NE(r.head.find("Allow: OPTIONS, POST"), std::string::npos);
  EXPECT_EQ(r.head.find("Access-Control"), std::string::npos);  // CORS is off.
}

TEST_F(HttpServerTest, OversizedHeadersBodiesAndMalformedRequestsAreRefusedAndServingGoesOn) {
  ServerOptions o;
  o.max_header_bytes = 4096;
  o.max_body_bytes = 1 << 20;
  StartServer(o);
  {
    Conn c(ep());
    ASSERT_TRUE(c.Send(Get("/hello", "X-Big: " + std::string(8192, 'a') + "\r\n")));
    Reply r = c.Read();
    EXPECT_EQ(r.status, 431);
    EXPECT_EQ(Json(r.body)["error"]["code"], "request_header_fields_too_large");
    EXPECT_TRUE(r.closed);
  }
  {
    // Refused from its Content-Length, before a byte of the body is sent.
    Conn c(ep());
    ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 52428800\r\n\r\n"));
    Reply r = c.Read();
    EXPECT_EQ(r.status, 413);
    EXPECT_EQ(Json(r.body)["error"]["code"], "request_too_large");
  }
  {
    // A chunked body that grows past the limit.
    Conn c(ep());
    std::string req = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
    const std::string chunk(256 << 10, 'z');
    ASSERT_TRUE(c.Send(req));
    for (int i = 0; i < 5; ++i) {
      if (!c.Send("40000\r\n" + chunk + "\r\n")) {
        break;
      }
    }
    EXPECT_EQ(c.Read().status, 413);
  }
  {
    Conn c(ep());
    ASSERT_TRUE(c.Send("GARBAGE\x01 / HTTP/9\r\n\r\n"));
    EXPECT_EQ(c.Read().status, 400);
  }
  Conn c(ep());
  ASSERT_TRUE(c.Send(Get("/hello")));
  EXPECT_EQ(c.Read().status, 200);
}

TEST_F(HttpServerTest, ARouteGateRefusesFromTheHeadBeforeTheBodyIsRead) {
  ServerOptions o;
  o.request_timeout = 60s;  // A server waiting for the body would not answer.
  StartServer(o);
  {
    // 8 MiB announced, none sent: the answer comes from the head alone.
    Conn c(ep());
    ASSERT_TRUE(c.Send("POST /gated HTTP/1.1\r\nHost: t\r\nContent-Length: 8388608\r\n\r\n"));
    Reply r = c.Read();
    EXPECT_EQ(r.status, 401);
    EXPECT_EQ(Json(r.body)["error"]["code"], "invalid_api_key");
    EXPECT_TRUE(r.closed) << "the unread body ends the connection";
  }
  {
    // No 100 Continue for a refused request.
    Conn c(ep());
    ASSERT_TRUE(c.Send(
        "POST /gated HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
    Reply r = c.Read();
    EXPECT_EQ(r.status, 401);
  }
  {
    // With the key the body is read and handled; the handler runs once.
    Conn c(ep());
    ASSERT_TRUE(
        c.Send("POST /gated?x=1 HTTP/1.1\r\nHost: t\r\nX-Key: k\r\nContent-Length: 5\r\n\r\n"));
    ASSERT_TRUE(c.Send("hello"));
    Reply r = c.Read();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "hello");
  }
  EXPECT_EQ(gated_bodies_.load(), 1);
  Conn c(ep());
  ASSERT_TRUE(c.Send(Get("/hello")));
  EXPECT_EQ(c.Read().status, 200);
}

// The bounds sit a full second or more from each timeout (1.5 s, 4.5 s):
// CI runs this under ASan beside other suites on two cores.
TEST_F(HttpServerTest, SlowRequestsAndIdleConnectionsAreDroppedWithoutBlockingOthers) {
  ServerOptions o;
  o.request_timeout = 1500ms;
  o.idle_timeout = 4500ms;
  StartServer(o);
  std::vector<std::unique_ptr<Conn>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<Conn>(ep()));
    ASSERT_TRUE(slow.back()->Send("GET /hello HTTP/1.1\r\nHo"));  // And never the rest.
  }
  Conn idle(ep(), 10s);
  const auto t0 = std::chrono::steady_clock::now();
  Conn c(ep());
  ASSERT_TRUE(c.Send(Get("/hello")));
  EXPECT_EQ(c.Read().status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1000ms);  // Not behind the slow ones.
  for (auto& s : slow) {
    EXPECT_TRUE(s->ClosedByServer());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3500ms);  // Dropped at ~1.5 s.
  EXPECT_TRUE(idle.ClosedByServer());                        // At ~4.5 s.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 3500ms);
}

TEST_F(HttpServerTest, ManyWaitingRequestsDoNotHoldThreads) {
  ServerOptions o;
  o.io_threads = 1;
  StartServer(o);
  std::vector<std::unique_ptr<Conn>> waiting;
  for (int i = 0; i < 64; ++i) {
    waiting.push_back(std::make_unique<Conn>(ep()));
    ASSERT_TRUE(waiting.back()->Send(Get("/wait?ms=2500")));
  }
  const auto t0 = std::chrono::steady_clock::now();
  Conn c(ep());
  ASSERT_TRUE(c.Send(Get("/hello")));
  EXPECT_EQ(c.Read().status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);  // Not behind the waiters.
  ASSERT_TRUE(c.Send(Get("/blocking")));
  EXPECT_EQ(c.Read().body, "slow");
  for (auto& w : waiting) {
    EXPECT_EQ(w->Read().body, "waited");
  }
}

TEST_F(HttpServerTest, AClientThatLeavesWhileItsRequestWaitsIsNoticed) {
  StartServer();
  for (int i = 0; i < 3; ++i) {
    Conn c(ep());
    ASSERT_TRUE(c.Send(Get("/hang")));
    std::this_thread::sleep_for(50ms);
    c.Close();
  }
  EXPECT_TRUE(Eventually([&] { return left_ == 3; }, 10s));
  EXPECT_TRUE(Eventually([&] { return server_->connections() == 0; }, 10s));
}

TEST_F(HttpServerTest, AStreamWhoseClientStopsReadingIsClosedAtTheWriteTimeout) {
  ServerOptions o;
  o.write_timeout = 300ms;
  StartServer(o);
  Conn c(ep());
  ASSERT_TRUE(c.Send(Get("/flood")));
  EXPECT_TRUE(Eventually([&] { return left_ == 1; }, 5s));  // Its OnClose ran.
  EXPECT_TRUE(Eventually([&] { return server_->connections() == 0; }, 10s));
}

TEST_F(HttpServerTest, StreamsAreChunkedWithKeepAlivesAndEnd) {
  ServerOptions o;
  o.stream_keepalive = 100ms;
  StartServer(o);
  Conn c(ep());
  ASSERT_TRUE(c.Send(Get("/stream")));
  Reply r = c.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body.find("data: 1\n\n"), 0u);
  EXPECT_NE(r.body.find(": ka\n\n"), std::string::npos);  // Quiet for 600 ms.
  EXPECT_EQ(r.body.substr(r.body.size() - 9), "data: 2\n\n");
  ASSERT_TRUE(c.Send(Get("/hello")));  // The connection is reusable after.
  EXPECT_EQ(c.Read().body, "hi");
}

TEST_F(HttpServerTest, ATakenPortIsAnError) {
  StartServer();
  ServerOptions o;
  o.listen = ep();
  auto second = Server::Start(o, Router());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(ep()), std::string::npos);
}

TEST_F(HttpServerTest, ConnectionsPastTheLimitAre503) {
  ServerOptions o;
  o.max_connections = 4;
  StartServer(o);
  std::vector<std::unique_ptr<Conn>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<Conn>(ep()));
  }
  ASSERT_TRUE(Eventually([&] { return server_->connections() == 4; }, 10s));
  Conn extra(ep());
  Reply r = extra.Read();
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(Json(r.body)["error"]["code"], "too_many_connections");
  held.clear();
  ASSERT_TRUE(Eventually([&] { return server_->connections() == 0; }, 10s));
  Conn c(ep());
  ASSERT_TRUE(c.Send(Get("/hello")));
  EXPECT_EQ(c.Read().status, 200);
}

TEST_F(HttpServerTest, CorsAnswersPreflightsForAllowedOriginsOnly) {
  ServerOptions o;
  o.cors_origins = {"https://app.example"};
  StartServer(o);
  Conn c(ep());
  const std::string preflight =
      "OPTIONS /echo HTTP/1.1\r\nHost: t\r\nOrigin: https://app.example\r\n"
      "Access-Control-Request-Method: POST\r\n\r\n";
  ASSERT_TRUE(c.Send(preflight));
  Reply r = c.Read();
  EXPECT_EQ(r.status, 204);
  EXPECT_NE(r.head.find("Access-Control-Allow-Origin: https://app.example"), std::string::npos);
  EXPECT_NE(r.head.find("Access-Control-Allow-Methods: OPTIONS, POST"), std::string::npos);
  EXPECT_NE(r.head.find("Authorization"), std::string::npos);
  ASSERT_TRUE(c.Send(Get("/hello", "Origin: https://app.example\r\n")));
  r = c.Read();
  EXPECT_NE(r.head.find("Access-Control-Allow-Origin: https://app.example"), std::string::npos);
  ASSERT_TRUE(c.Send(Get("/hello", "Origin: https://evil.example\r\n")));
  r = c.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.head.find("Access-Control"), std::string::npos);
}

// Bounded random input (fixed seed): mangled requests, cut anywhere, with
// random bytes; the server answers or drops each and keeps serving — and a
// handler that throws gets a 500, not a dead I/O thread.
TEST_F(HttpServerTest, RandomGarbageNeverTakesTheServerDown) {
  ServerOptions o;
  o.request_timeout = 200ms;
  o.max_header_bytes = 2048;
  o.max_body_bytes = 4096;
  StartServer(o);
  std::mt19937 rng(42);
  const std::vector<std::string> seeds = {
      Get("/echo/a/b?q=%zz%4"), Get("/hello", "Expect: 100-continue\r\n"),
      "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      "OPTIONS /echo HTTP/1.1\r\nOrigin: x\r\nAccess-Control-Request-Method: POST\r\n\r\n"};
  for (int i = 0; i < 300; ++i) {
    std::string req = seeds[rng() % seeds.size()];
    const int edits = static_cast<int>(rng() % 6);
    for (int e = 0; e < edits && !req.empty(); ++e) {
      const std::size_t at = rng() % req.size();
      switch (rng() % 3) {
        case 0:
          req[at] = static_cast<char>(rng() % 256);
          break;
        case 1:
          req.insert(at, std::string(rng() % 64, static_cast<char>(rng() % 256)));
          break;
        default:
          req.resize(at);  // Cut short.
      }
    }
    Conn c(ep(), 300ms);
    c.Send(req);
    if (i % 3 == 0) {
      c.Read();  // Some wait for whatever comes back.
    }
  }
  Conn c(ep());
  ASSERT_TRUE(c.Send(Get("/throws")));
  const Reply thrown = c.Read();
  EXPECT_EQ(thrown.status, 500);
  EXPECT_EQ(Json(thrown.body)["error"]["code"], "internal_error");
  ASSERT_TRUE(c.Send(Get("/hello")));
  EXPECT_EQ(c.Read().body, "hi");
  c.Close();
  EXPECT_TRUE(Eventually([&] { return server_->connections() == 0; }, 5s));
}

// A fresh directory for a test's TLS files (empty when none could be made).
std::string TempDir() {
  char tmpl[] = "/tmp/sluice-https-XXXXXX";
  return ::mkdtemp(tmpl) != nullptr ? std::string(tmpl) : std::string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// HTTPS: a client trusting the server's CA is served (keep-alive, a
// request body, a chunked stream); a plaintext client and one trusting
// another CA get no answer, and the server goes on serving.
TEST_F(HttpServerTest, HttpsServesClientsThatTrustItsCertificate) {
  const std::string dir = TempDir();
  const sluice::testing::Pki pki = sluice::testing::MakePki(dir);
  ASSERT_FALSE(pki.ca.empty()) << "openssl failed";
  ServerOptions o;
  o.tls_cert_pem = ReadFile(pki.cert);
  o.tls_key_pem = ReadFile(pki.key);
  StartServer(o);
  httplib::Client c("https://" + ep());
  c.set_ca_cert_path(pki.ca);
  c.enable_server_certificate_verification(true);
  c.set_keep_alive(true);
  auto hello = c.Get("/hello");
  ASSERT_TRUE(hello) << httplib::to_string(hello.error());
  EXPECT_EQ(hello->status, 200);
  EXPECT_EQ(hello->body, "hi");
  auto echo = c.Post("/echo", std::string(100000, 'x'), "text/plain");
  ASSERT_TRUE(echo);
  EXPECT_EQ(echo->body, std::string(100000, 'x'));
  auto stream = c.Get("/stream");
  ASSERT_TRUE(stream);
  EXPECT_EQ(stream->body, "data: 1\n\ndata: 2\n\n");
  EXPECT_EQ(server_->connections(), 1u) << "one kept-alive connection served all three";

  Conn plain(ep());
  ASSERT_TRUE(plain.Send(Get("/hello")));
  const Reply r = plain.Read();
  EXPECT_EQ(r.status, 0) << "a plaintext request was answered: " << r.head;
  httplib::Client other("https://" + ep());
  other.set_ca_cert_path(pki.other_ca);
  other.enable_server_certificate_verification(true);
  auto refused = other.Get("/hello");
  EXPECT_FALSE(refused) << "a client trusting another CA was served";

  auto again = c.Get("/hello");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->body, "hi");
  std::filesystem::remove_all(dir);
}

TEST_F(HttpServerTest, BadTlsFilesAreRefused) {
  const std::string dir = TempDir();
  const sluice::testing::Pki pki = sluice::testing::MakePki(dir);
  ASSERT_FALSE(pki.ca.empty()) << "openssl failed";
  ServerOptions o;
  o.tls_cert_pem = ReadFile(pki.cert);
  Result<std::unique_ptr<Server>> no_key = Server::Start(o, Router());
  EXPECT_EQ(no_key.status().code(), StatusCode::kInvalidArgument);
  o.tls_key_pem = "not a key";
  Result<std::unique_ptr<Server>> garbage = Server::Start(o, Router());
  EXPECT_NE(garbage.status().message().find("the TLS key does not load"), std::string_view::npos)
      << garbage.status().ToString();
  o.tls_key_pem = ReadFile(dir + "/other.key");  // Another certificate's key.
  Result<std::unique_ptr<Server>> mismatch = Server::Start(o, Router());
  EXPECT_NE(mismatch.status().message().find("is not the certificate's"), std::string_view::npos)
      << mismatch.status().ToString();
  std::filesystem::remove_all(dir);
}

TEST_F(HttpServerTest, BadOptionsAreRefused) {
  ServerOptions o;
  o.io_threads = 0;
  EXPECT_EQ(Server::Start(o, Router()).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.listen = "127.0.0.1";
  EXPECT_EQ(Server::Start(o, Router()).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.request_timeout = 0ms;
  EXPECT_EQ(Server::Start(o, Router()).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::http
