// HTTPS requests whose bytes reach the server together with TLS records it
// has not yet decrypted: the client's last handshake flight and its first
// request in one segment, and two requests in one segment on a kept-alive
// connection. The server must serve them from what its TLS layer already
// read, not wait for the socket to become readable again.
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "common/net.h"
#include "common/testing/test_pki.h"
#include "http/server.h"

namespace sluice::http {
namespace {

using namespace std::chrono_literals;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A TLS client over memory BIOs: the test decides which records leave in
// one send(). Blocking, with every wait bounded by `timeout`.
class FlightClient {
 public:
  FlightClient(const std::string& endpoint, const std::string& ca_file) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(ctx_, ca_file.c_str(), nullptr);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    ssl_ = SSL_new(ctx_);
    out_ = BIO_new(BIO_s_mem());
    in_ = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl_, in_, out_);  // The SSL owns both.
    SSL_set_connect_state(ssl_);
    auto hp = sluice::internal::ParseHostPort(endpoint, false);
    auto fd = hp.ok() ? sluice::internal::ConnectTcp(*hp, 2s)
                      : Result<sluice::internal::UniqueFd>(hp.status());
    if (fd.ok()) {
      fd_ = std::move(*fd);
    }
  }
  ~FlightClient() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
  }
  FlightClient(const FlightClient&) = delete;
  FlightClient& operator=(const FlightClient&) = delete;

  // Runs the handshake to completion on the client's side, leaving its last
  // flight (the client Finished) unsent. False on failure.
  bool Handshake() {
    if (!fd_.valid()) {
      return false;
    }
    while (true) {
      const int r = SSL_do_handshake(ssl_);
      if (r == 1) {
        return true;
      }
      if (SSL_get_error(ssl_, r) != SSL_ERROR_WANT_READ || !Flush() || !Fill()) {
        return false;
      }
    }
  }
  // Encrypts each of `requests` as its own record(s) and sends them, with
  // whatever handshake bytes are still unsent, in one send().
  bool Send(std::initializer_list<std::string> requests) {
    for (const std::string& r : requests) {
      if (SSL_write(ssl_, r.data(), static_cast<int>(r.size())) != static_cast<int>(r.size())) {
        return false;
      }
    }
    return Flush();
  }
  // Ends the TLS session as a clean client does: close_notify, then FIN.
  // The socket stays open (no reset). False on failure.
  bool CloseNotify() {
    SSL_shutdown(ssl_);
    return Flush() && ::shutdown(fd_.get(), SHUT_WR) == 0;
  }
  // Reads decrypted bytes until `needle` occurs `count` times in all read so
  // far, the server closes, or 5 s pass. Returns everything read.
  std::string ReadUntil(const std::string& needle, int count) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (Count(needle) < count && std::chrono::steady_clock::now() < deadline) {
      char buf[4096];
      const int n = SSL_read(ssl_, buf, sizeof buf);
      if (n > 0) {
        plain_.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (SSL_get_error(ssl_, n) != SSL_ERROR_WANT_READ || !Fill(deadline)) {
        break;
      }
    }
    return plain_;
  }

 private:
  int Count(const std::string& needle) const {
    int n = 0;
    for (std::size_t at = plain_.find(needle); at != std::string::npos;
         at = plain_.find(needle, at + needle.size())) {
      ++n;
    }
    return n;
  }
  bool Flush() {
    char* data = nullptr;
    const long n = BIO_get_mem_data(out_, &data);
    if (n <= 0) {
      return true;
    }
    const bool ok = ::send(fd_.get(), data, static_cast<std::size_t>(n), MSG_NOSIGNAL) == n;
    (void)BIO_reset(out_);
    return ok;
  }
  // Moves what the socket has (waiting until `deadline` for some) into the
  // SSL's input. False on close, error or timeout.
  bool Fill(std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::now() +
                                                             5s) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd_.get(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) != 1) {
      return false;
    }
    char buf[16384];
    const ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
    return n > 0 && BIO_write(in_, buf, static_cast<int>(n)) == n;
  }

  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  BIO* in_ = nullptr;
  BIO* out_ = nullptr;
  sluice::internal::UniqueFd fd_;
  std::string plain_;
};

class HttpsFlightTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice-tls-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    pki_ = sluice::testing::MakePki(dir_.string());
    ASSERT_FALSE(pki_.ca.empty()) << "openssl failed";
    ServerOptions o;
    o.tls_cert_pem = ReadFile(pki_.cert);
    o.tls_key_pem = ReadFile(pki_.key);
    // A stuck request is noticed in seconds, not at the 60 s default.
    o.idle_timeout = 3s;
    Router r;
    r.Add("GET", "/hello", [](Request& req, std::shared_ptr<Exchange> ex) {
      Response res;
      res.content_type = "text/plain";
      res.body = "hi " + std::string(req.Query("n").value_or("-")) + ".";
      ex->Respond(std::move(res));
    });
    // Answers 50 ms later, from a timer: the session watches the socket
    // meanwhile.
    r.Add("GET", "/later", [](Request& req, std::shared_ptr<Exchange> ex) {
      std::string n(req.Query("n").value_or("-"));
      ex->After(50ms, [ex, n] {
        Response res;
        res.content_type = "text/plain";
        res.body = "later " + n + ".";
        ex->Respond(std::move(res));
      });
    });
    // Never answers: runs `left_` when the client leaves.
    r.Add("GET", "/hold", [this](Request&, std::shared_ptr<Exchange> ex) {
      ex->OnClose([this] {
        std::lock_guard<std::mutex> lock(mu_);
        left_ = true;
        cv_.notify_all();
      });
    });
    auto s = Server::Start(o, std::move(r));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string Get(int n, const std::string& path = "/hello") {
    return "GET " + path + "?n=" + std::to_string(n) + " HTTP/1.1\r\nHost: t\r\n\r\n";
  }

  // Whether a /hold exchange's client left within `d`.
  bool LeftWithin(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, d, [this] { return left_; });
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool left_ = false;
  std::filesystem::path dir_;
  sluice::testing::Pki pki_;
  std::unique_ptr<Server> server_;
};

TEST_F(HttpsFlightTest, ARequestSentWithTheClientFinishedIsServed) {
  FlightClient c(server_->endpoint(), pki_.ca);
  ASSERT_TRUE(c.Handshake()) << "the handshake failed";
  ASSERT_TRUE(c.Send({Get(1)}));
  const std::string got = c.ReadUntil("hi 1.", 1);
  EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << "answer: '" << got << "'";
  EXPECT_NE(got.find("hi 1."), std::string::npos) << "answer: '" << got << "'";
}

TEST_F(HttpsFlightTest, RequestsSentTogetherOnAKeptAliveConnectionAreAllServed) {
  FlightClient c(server_->endpoint(), pki_.ca);
  ASSERT_TRUE(c.Handshake());
  ASSERT_TRUE(c.Send({Get(1)}));
  ASSERT_NE(c.ReadUntil("hi 1.", 1).find("hi 1."), std::string::npos);
  // Two requests, two records, one segment: the second's record is read
  // from the socket along with the first.
  ASSERT_TRUE(c.Send({Get(2), Get(3)}));
  const std::string got = c.ReadUntil("hi ", 3);
  EXPECT_NE(got.find("hi 2."), std::string::npos) << "answers: '" << got << "'";
  EXPECT_NE(got.find("hi 3."), std::string::npos) << "answers: '" << got << "'";
}

// While a handler owes its answer the session watches the socket for the
// client leaving; the next request, read by the TLS layer along with the
// first, must still be served once the answer is out.
TEST_F(HttpsFlightTest, ARequestSentWithOneAnsweredLaterIsServedAfterIt) {
  FlightClient c(server_->endpoint(), pki_.ca);
  ASSERT_TRUE(c.Handshake());
  ASSERT_TRUE(c.Send({Get(1, "/later"), Get(2, "/later")}));
  const std::string got = c.ReadUntil("later ", 2);
  EXPECT_NE(got.find("later 1."), std::string::npos) << "answers: '" << got << "'";
  EXPECT_NE(got.find("later 2."), std::string::npos) << "answers: '" << got << "'";
}

// A client that ends its TLS session cleanly while a handler owes the
// answer has left: the watch must see the close_notify (bytes on the
// socket, so not an EOF there) for what it is and run OnClose, not take
// it for a pipelined request and hold the exchange until it is answered.
TEST_F(HttpsFlightTest, AClientEndingItsSessionWhileWaitingIsNoticed) {
  FlightClient c(server_->endpoint(), pki_.ca);
  ASSERT_TRUE(c.Handshake());
  ASSERT_TRUE(c.Send({Get(1, "/hold")}));
  EXPECT_FALSE(LeftWithin(100ms)) << "OnClose ran before the client left";
  ASSERT_TRUE(c.CloseNotify());
  EXPECT_TRUE(LeftWithin(2s)) << "the session did not notice the client's close_notify";
}

// A request sent on its own while the previous one waits for its answer
// is read by the watch through the TLS layer and served after it.
TEST_F(HttpsFlightTest, ARequestSentWhileOneWaitsIsServedAfterIt) {
  FlightClient c(server_->endpoint(), pki_.ca);
  ASSERT_TRUE(c.Handshake());
  ASSERT_TRUE(c.Send({Get(1, "/later")}));
  ASSERT_TRUE(c.Send({Get(2)}));
  const std::string got = c.ReadUntil("hi 2.", 1);
  const std::size_t first = got.find("later 1."), second = got.find("hi 2.");
  EXPECT_NE(first, std::string::npos) << "answers: '" << got << "'";
  EXPECT_NE(second, std::string::npos) << "answers: '" << got << "'";
  EXPECT_LT(first, second) << "answers out of order: '" << got << "'";
}

}  // namespace
}  // namespace sluice::http
