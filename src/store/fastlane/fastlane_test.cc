// The fast lane's framing and its server against a scripted handler:
// calls, one-way sends, answers from other threads, master errors, garbage
// and over-long frames, the connection cap, and shutdown with idle and
// blocked connections.
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/mutex.h"
#include "common/net.h"
#include "common/security_keys.h"
#include "common/testing/eventually.h"
#include "store/fastlane/client.h"
#include "store/fastlane/server.h"

namespace sluice::internal::fastlane {
namespace {

using namespace std::chrono_literals;

TEST(FastLaneFrameTest, HeadersRoundTripAndBadFieldsAreNamed) {
  RequestHeader q;
  q.body_len = 1234;
  q.method = static_cast<std::uint16_t>(Method::kGetStart);
  q.flags = kFlagOneWay;
  std::byte buf[kHeaderSize];
  Encode(q, buf);
  Result<RequestHeader> d = DecodeRequest(buf);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->body_len, 1234u);
  EXPECT_EQ(d->method, q.method);
  EXPECT_EQ(d->flags, kFlagOneWay);

  auto bad = [](RequestHeader h) {
    std::byte b[kHeaderSize];
    Encode(h, b);
    return std::string(DecodeRequest(b).status().message());
  };
  RequestHeader h = q;
  h.magic = 0;
  EXPECT_NE(bad(h).find("magic"), std::string::npos);
  h = q;
  h.body_len = kMaxRequestBody + 1;
  EXPECT_NE(bad(h).find("exceeds"), std::string::npos);
  h = q;
  h.method = 99;
  EXPECT_NE(bad(h).find("unknown method 99"), std::string::npos);
  h = q;
  h.flags = 4;
  EXPECT_NE(bad(h).find("flags"), std::string::npos);

  ResponseHeader r;
  r.code = static_cast<std::uint8_t>(StatusCode::kNotFound);
  r.body_len = 5;
  Encode(r, buf);
  Result<ResponseHeader> rd = DecodeResponse(buf);
  ASSERT_TRUE(rd.ok());
  EXPECT_EQ(rd->code, r.code);
  r.code = 200;
  Encode(r, buf);
  EXPECT_FALSE(DecodeResponse(buf).ok());
}

class FastLaneServerTest : public ::testing::Test {
 protected:
  void Start(std::size_t max_connections = 8, std::string key = {},
             std::size_t max_pending_handshakes = 64,
             std::chrono::milliseconds handshake_timeout = 5s) {
    auto s = Server::Start(
        HostPort{"127.0.0.1", 0},
        [this](Method m, std::string_view body, Responder respond) {
          ++calls_;
          if (body == "defer") {
            // Answered later, from another thread (as a parked read is).
            MutexLock lock(deferred_mu_);
            deferred_.push_back(std::move(respond));
            return;
          }
          if (body == "block") {
            while (!release_) {
              std::this_thread::sleep_for(1ms);
            }
          }
          if (body == "fail") {
            respond(Status(StatusCode::kNotFound, "no such key", FailureScope::kRequest));
            return;
          }
          if (m == Method::kGetEnd) {
            ++one_way_;
          }
          respond(std::string(MethodName(m)) + ":" + std::string(body));
          respond(std::string("a second answer is ignored"));
        },
        ServerLimits{max_connections, max_pending_handshakes, handshake_timeout}, std::move(key));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    auto hp = ParseHostPort(server_->endpoint(), false);
    ASSERT_TRUE(hp.ok());
    endpoint_ = *hp;
  }

  // A raw connection to the server, for frames the client never sends; the
  // server's challenge is read (into `nonce` when given).
  UniqueFd Raw(std::string* nonce = nullptr) {
    auto fd = ConnectTcp(endpoint_, 2s);
    EXPECT_TRUE(fd.ok());
    EXPECT_TRUE(SetIoTimeout(fd->get(), 5s).ok());
    std::byte head[kHeaderSize];
    EXPECT_TRUE(RecvAll(fd->get(), head, kHeaderSize).ok());
    Result<ResponseHeader> h = DecodeResponse(head);
    EXPECT_TRUE(h.ok() && h->code == 0 && h->body_len == kChallengeBytes) << "a challenge first";
    std::string challenge(kChallengeBytes, '\0');
    EXPECT_TRUE(RecvAll(fd->get(), challenge.data(), challenge.size()).ok());
    if (nonce != nullptr) {
      *nonce = challenge;
    }
    return std::move(*fd);
  }

  // Sends one request frame on `fd` and reads the answer: its code, its
  // body into `*answer`; 255 when no answer came.
  static std::uint8_t SendFrame(int fd, Method m, std::string_view body, std::string* answer) {
    RequestHeader h;
    h.method = static_cast<std::uint16_t>(m);
    h.body_len = static_cast<std::uint32_t>(body.size());
    std::byte head[kHeaderSize];
    Encode(h, head);
    if (!SendAll(fd, head, kHeaderSize).ok() || !SendAll(fd, body.data(), body.size()).ok() ||
        !RecvAll(fd, head, kHeaderSize).ok()) {
      return 255;
    }
    Result<ResponseHeader> r = DecodeResponse(head);
    if (!r.ok()) {
      return 255;
    }
    answer->assign(r->body_len, '\0');
    return RecvAll(fd, answer->data(), answer->size()).ok() ? r->code : 255;
  }

  Mutex deferred_mu_;
  std::vector<Responder> deferred_;  // Guarded by deferred_mu_.
  std::atomic<int> calls_{0};
  std::atomic<int> one_way_{0};
  std::atomic<bool> release_{false};
  std::unique_ptr<Server> server_;
  HostPort endpoint_;
};

TEST_F(FastLaneServerTest, AnswersMayComeLaterFromAnyThread) {
  Start();
  Client c(endpoint_, 20us, 4);
  std::thread answerer([this] {
    Responder r({}, true);  // Replaced once the call has arrived.
    while (true) {
      {
        MutexLock lock(deferred_mu_);
        if (!deferred_.empty()) {
          r = std::move(deferred_.back());
          deferred_.clear();
          break;
        }
      }
      std::this_thread::sleep_for(1ms);
    }
    std::this_thread::sleep_for(20ms);
    r(std::string("later"));
  });
  Client::Outcome out = c.Call(Method::kGetStart, "defer", 5s);
  answerer.join();
  ASSERT_TRUE(out.transport_ok) << out.result.status().ToString();
  ASSERT_TRUE(out.result.ok()) << out.result.status().ToString();
  EXPECT_EQ(*out.result, "later");
  // The connection serves the next call as usual.
  Client::Outcome next = c.Call(Method::kExists, "k", 2s);
  ASSERT_TRUE(next.result.ok());
  EXPECT_EQ(*next.result, "Exists:k") << "the ignored second answer never reached the client";
}

TEST_F(FastLaneServerTest, AnAnswerAfterTheConnectionClosedIsDropped) {
  Start();
  {
    Client c(endpoint_, 20us, 4);
    Client::Outcome out = c.Call(Method::kWaitFor, "defer", 50ms);
    EXPECT_FALSE(out.transport_ok) << "no answer in time";
  }  // The client hangs up.
  ASSERT_TRUE(Eventually([&] { return server_->connections() == 0; }));
  std::vector<Responder> late;
  {
    MutexLock lock(deferred_mu_);
    late.swap(deferred_);
  }
  ASSERT_EQ(late.size(), 1u);
  late[0](std::string("too late"));  // Must neither crash nor write elsewhere.
  server_.reset();
  late[0](std::string("after the server"));
}

TEST_F(FastLaneServerTest, CallsAnswerAndErrorsKeepTheirCode) {
  Start();
  Client c(endpoint_, 20us, 4);
  Client::Outcome ok = c.Call(Method::kExists, "k1", 2s);
  ASSERT_TRUE(ok.transport_ok);
  ASSERT_TRUE(ok.result.ok());
  EXPECT_EQ(*ok.result, "Exists:k1");
  Client::Outcome err = c.Call(Method::kRemove, "fail", 2s);
  ASSERT_TRUE(err.transport_ok);
  EXPECT_EQ(err.result.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(err.result.status().message(), "no such key");
  EXPECT_TRUE(c.Send(Method::kGetEnd, "lease", 2s));
  // The one-way request is answered by nothing; the next call on the same
  // connection still gets its own answer.
  Client::Outcome next = c.Call(Method::kPutEnd, "k2", 2s);
  ASSERT_TRUE(next.transport_ok && next.result.ok());
  EXPECT_EQ(*next.result, "PutEnd:k2");
  EXPECT_EQ(one_way_.load(), 1);
  EXPECT_EQ(server_->requests(), 4u);
}

TEST_F(FastLaneServerTest, ManyThreadsGetTheirOwnAnswers) {
  Start(16);
  Client c(endpoint_, 0us, 8);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string body = std::to_string(t) + "/" + std::to_string(i);
        Client::Outcome o = c.Call(Method::kGetStart, body, 5s);
        if (!o.transport_ok || !o.result.ok() || *o.result != "GetStart:" + body) {
          ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(server_->connections(), 8u);
}

TEST_F(FastLaneServerTest, GarbageGetsAnErrorAndTheServerKeepsServing) {
  Start();
  {
    UniqueFd fd = Raw();
    const char junk[kHeaderSize] = "GET / HTTP/1.1\r";
    ASSERT_TRUE(SendAll(fd.get(), junk, sizeof(junk)).ok());
    std::byte head[kHeaderSize];
    ASSERT_TRUE(RecvAll(fd.get(), head, kHeaderSize).ok());
    Result<ResponseHeader> r = DecodeResponse(head);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->code, static_cast<std::uint8_t>(StatusCode::kInvalidArgument));
    std::string msg(r->body_len, '\0');
    ASSERT_TRUE(RecvAll(fd.get(), msg.data(), msg.size()).ok());
    EXPECT_NE(msg.find("magic"), std::string::npos) << msg;
    char more;
    EXPECT_FALSE(RecvAll(fd.get(), &more, 1).ok()) << "the connection is closed after garbage";
  }
  {
    // An over-long length is refused before any body is read.
    UniqueFd fd = Raw();
    RequestHeader h;
    h.method = static_cast<std::uint16_t>(Method::kPutStart);
    h.body_len = 0xFFFFFFFF;
    std::byte head[kHeaderSize];
    Encode(h, head);
    ASSERT_TRUE(SendAll(fd.get(), head, kHeaderSize).ok());
    ASSERT_TRUE(RecvAll(fd.get(), head, kHeaderSize).ok());
    EXPECT_EQ(DecodeResponse(head)->code, static_cast<std::uint8_t>(StatusCode::kInvalidArgument));
  }
  {
    // A peer that hangs up mid-body costs nothing.
    UniqueFd fd = Raw();
    RequestHeader h;
    h.method = static_cast<std::uint16_t>(Method::kPutStart);
    h.body_len = 100;
    std::byte head[kHeaderSize];
    Encode(h, head);
    ASSERT_TRUE(SendAll(fd.get(), head, kHeaderSize).ok());
    ASSERT_TRUE(SendAll(fd.get(), "abc", 3).ok());
  }
  Client c(endpoint_, 0us, 2);
  Client::Outcome o = c.Call(Method::kExists, "still", 2s);
  ASSERT_TRUE(o.transport_ok && o.result.ok());
  EXPECT_EQ(*o.result, "Exists:still");
  EXPECT_EQ(calls_.load(), 1) << "no handler ran for a malformed frame";
}

TEST_F(FastLaneServerTest, WithAKeyOnlyConnectionsProvingItAreServed) {
  const std::string key = DeriveKey("0123456789abcdef0123", kFastLaneKeyPurpose);
  Start(8, key);
  Client good(endpoint_, 0us, 2, key);
  Client::Outcome o = good.Call(Method::kExists, "k", 2s);
  ASSERT_TRUE(o.transport_ok && o.result.ok()) << o.result.status().ToString();
  EXPECT_EQ(*o.result, "Exists:k");

  Client none(endpoint_, 0us, 2);
  o = none.Call(Method::kRemove, "k", 2s);
  ASSERT_TRUE(o.transport_ok);
  EXPECT_EQ(o.result.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(o.result.status().message().find("no cluster credential"), std::string_view::npos);

  Client wrong(endpoint_, 0us, 2, DeriveKey("another-cluster-token", kFastLaneKeyPurpose));
  o = wrong.Call(Method::kRemove, "k", 2s);
  ASSERT_TRUE(o.transport_ok);
  EXPECT_EQ(o.result.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(o.result.status().message().find("wrong cluster credential"), std::string_view::npos);

  {
    // A Hello replayed on another connection fails: each has its nonce.
    // On its own connection the master answers it with its own proof.
    std::string nonce;
    UniqueFd fd = Raw(&nonce);
    const std::string client_nonce(kChallengeBytes, 'c');
    const auto proof = HelloProof(key, false, nonce, client_nonce);
    const std::string hello =
        client_nonce + std::string(reinterpret_cast<const char*>(proof.data()), proof.size());
    UniqueFd other = Raw();
    std::string answer;
    EXPECT_EQ(SendFrame(other.get(), Method::kHello, hello, &answer),
              static_cast<std::uint8_t>(StatusCode::kUnauthenticated));
    ASSERT_EQ(SendFrame(fd.get(), Method::kHello, hello, &answer), 0);
    const auto mine = HelloProof(key, true, nonce, client_nonce);
    EXPECT_EQ(answer, std::string(reinterpret_cast<const char*>(mine.data()), mine.size()));
    EXPECT_NE(answer, std::string(reinterpret_cast<const char*>(proof.data()), proof.size()));
  }
  EXPECT_EQ(calls_.load(), 1) << "no handler ran for a refused connection";
  EXPECT_EQ(server_->refused(), 3u);
  o = good.Call(Method::kExists, "still", 2s);
  ASSERT_TRUE(o.transport_ok && o.result.ok()) << "the server keeps serving the cluster";
}

// After the Hello, each request and answer carries a MAC under the
// connection's keys and its frame number: a request sent without one,
// with a wrong one, or replayed on the same connection is refused (the
// connection closes, no handler runs); a sealed one is served and its
// answer checks. Before the MACs, any frame on an authenticated
// connection was served.
TEST_F(FastLaneServerTest, RequestsAfterTheHelloCarryMacsOrAreRefused) {
  const std::string key = DeriveKey("0123456789abcdef0123", kFastLaneKeyPurpose);
  Start(8, key);
  // A proven connection; `out`/`in` are its MACs as the client keeps them.
  auto proven = [&](LaneMac* out, LaneMac* in) {
    std::string nonce;
    UniqueFd fd = Raw(&nonce);
    const std::string client_nonce(kChallengeBytes, 'c');
    const auto proof = HelloProof(key, false, nonce, client_nonce);
    std::string answer;
    EXPECT_EQ(SendFrame(fd.get(), Method::kHello,
                        client_nonce +
                            std::string(reinterpret_cast<const char*>(proof.data()), proof.size()),
                        &answer),
              0);
    *out = LaneMac(key, true, nonce, client_nonce);
    *in = LaneMac(key, false, nonce, client_nonce);
    return fd;
  };
  auto request = [](Method m, std::string_view body, std::byte head[kHeaderSize]) {
    RequestHeader h;
    h.method = static_cast<std::uint16_t>(m);
    h.body_len = static_cast<std::uint32_t>(body.size());
    Encode(h, head);
  };
  auto closed = [](int fd) {
    char b;
    return ::recv(fd, &b, 1, 0) == 0;
  };
  for (int how = 0; how < 3; ++how) {
    LaneMac out, in;
    UniqueFd fd = proven(&out, &in);
    std::byte head[kHeaderSize];
    request(Method::kRemove, "victim", head);
    if (how == 0) {  // No MAC: the next frame's bytes are taken for one.
      ASSERT_TRUE(SendAll(fd.get(), head, kHeaderSize).ok());
      ASSERT_TRUE(SendAll(fd.get(), "victim", 6).ok());
      ASSERT_TRUE(SendAll(fd.get(), "0123456789abcdef", kMacBytes).ok());
    } else if (how == 1) {  // A MAC under another connection's keys.
      LaneMac other(key, true, std::string(kChallengeBytes, 'x'),
                    std::string(kChallengeBytes, 'c'));
      ASSERT_TRUE(SendHeaderAndBody(fd.get(), head, "victim", &other).ok());
    } else {  // A valid frame, then the same bytes again.
      const FrameMac mac = out.Next(head, "victim");
      std::string frame(reinterpret_cast<const char*>(head), kHeaderSize);
      frame.append("victim").append(reinterpret_cast<const char*>(mac.data()), mac.size());
      ASSERT_TRUE(SendAll(fd.get(), frame.data(), frame.size()).ok());
      std::byte rh[kHeaderSize];
      ASSERT_TRUE(RecvAll(fd.get(), rh, kHeaderSize).ok());
      Result<ResponseHeader> r = DecodeResponse(rh);
      ASSERT_TRUE(r.ok());
      std::string body(r->body_len, '\0');
      FrameMac got;
      ASSERT_TRUE(RecvAll(fd.get(), body.data(), body.size()).ok());
      ASSERT_TRUE(RecvAll(fd.get(), got.data(), got.size()).ok());
      EXPECT_EQ(body, "Remove:victim");
      EXPECT_TRUE(in.CheckNext(rh, body, got)) << "the answer carries the master's MAC";
      ASSERT_TRUE(SendAll(fd.get(), frame.data(), frame.size()).ok());  // Replayed.
    }
    EXPECT_TRUE(closed(fd.get())) << how;
  }
  EXPECT_EQ(calls_.load(), 1) << "only the one sealed request ran";
  EXPECT_EQ(server_->refused(), 3u);
  Client good(endpoint_, 0us, 2, key);
  Client::Outcome o = good.Call(Method::kExists, "k", 2s);
  ASSERT_TRUE(o.transport_ok && o.result.ok()) << o.result.status().ToString();
}

// A fake master without the key: it sends a challenge and answers the
// client's Hello with the client's own proof (a reflection). The client
// refuses it and sends it no request.
TEST_F(FastLaneServerTest, AClientRefusesAMasterThatCannotProveTheKey) {
  const std::string key = DeriveKey("0123456789abcdef0123", kFastLaneKeyPurpose);
  std::uint16_t port = 0;
  Result<UniqueFd> listener = Listen(HostPort{"127.0.0.1", 0}, &port);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  std::atomic<int> requests_seen{0};
  std::thread fake([&] {
    // The listener is non-blocking: wait (bounded) for the client's dial.
    pollfd ready{listener->get(), POLLIN, 0};
    ASSERT_EQ(::poll(&ready, 1, 5000), 1) << "the client never dialled";
    UniqueFd fd(::accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    ASSERT_TRUE(SetIoTimeout(fd.get(), 5s).ok());
    ResponseHeader challenge;
    challenge.body_len = kChallengeBytes;
    std::byte head[kHeaderSize];
    Encode(challenge, head);
    ASSERT_TRUE(SendHeaderAndBody(fd.get(), head, std::string(kChallengeBytes, 'n')).ok());
    ASSERT_TRUE(RecvAll(fd.get(), head, kHeaderSize).ok());
    Result<RequestHeader> hello = DecodeRequest(head);
    ASSERT_TRUE(hello.ok());
    ASSERT_EQ(hello->method, static_cast<std::uint16_t>(Method::kHello));
    ASSERT_EQ(hello->body_len, kHelloBytes);
    std::string body(kHelloBytes, '\0');
    ASSERT_TRUE(RecvAll(fd.get(), body.data(), body.size()).ok());
    ResponseHeader ok;
    ok.body_len = 32;
    Encode(ok, head);
    ASSERT_TRUE(SendHeaderAndBody(fd.get(), head, body.substr(kChallengeBytes)).ok());
    // Anything more the client sends is a request the fake could answer.
    (void)SetIoTimeout(fd.get(), 500ms);
    if (RecvAll(fd.get(), head, kHeaderSize).ok()) {
      ++requests_seen;
    }
  });
  Client c(HostPort{"127.0.0.1", port}, 0us, 2, key);
  Client::Outcome o = c.Call(Method::kGetStart, "k", 2s);
  fake.join();
  EXPECT_EQ(o.result.status().code(), StatusCode::kUnauthenticated) << o.result.status().ToString();
  EXPECT_NE(o.result.status().message().find("did not prove"), std::string_view::npos);
  EXPECT_EQ(requests_seen.load(), 0) << "a request reached a master that did not prove the key";
}

// Before its Hello a stranger is refused unread (a 64 KiB body is not
// waited for), closed at the handshake deadline, and only so many may be
// in their handshake at once; the cluster's clients are served throughout.
TEST_F(FastLaneServerTest, StrangersAreRefusedUnreadTimedOutAndCapped) {
  const std::string key = DeriveKey("0123456789abcdef0123", kFastLaneKeyPurpose);
  Start(8, key, 2, 300ms);
  Client good(endpoint_, 0us, 2, key);
  ASSERT_TRUE(good.Call(Method::kExists, "warm", 2s).result.ok());  // Leaves an idle connection.
  {
    UniqueFd fd = Raw();
    RequestHeader h;
    h.method = static_cast<std::uint16_t>(Method::kPutStart);
    h.body_len = kMaxRequestBody;  // Announced, never sent.
    std::byte head[kHeaderSize];
    Encode(h, head);
    ASSERT_TRUE(SendAll(fd.get(), head, kHeaderSize).ok());
    ASSERT_TRUE(RecvAll(fd.get(), head, kHeaderSize).ok()) << "no answer before the body";
    EXPECT_EQ(DecodeResponse(head)->code, static_cast<std::uint8_t>(StatusCode::kUnauthenticated));
  }
  ASSERT_TRUE(Eventually([&] { return server_->connections() == 1; }, 5s));
  UniqueFd silent1 = Raw(), silent2 = Raw();  // The two pending slots.
  ASSERT_TRUE(Eventually([&] { return server_->connections() == 3; }, 5s));
  // A third stranger is closed at accept, before any challenge.
  Result<UniqueFd> third = ConnectTcp(endpoint_, 2s);
  ASSERT_TRUE(third.ok());
  ASSERT_TRUE(SetIoTimeout(third->get(), 5s).ok());
  char byte = 0;
  EXPECT_EQ(::recv(third->get(), &byte, 1, 0), 0) << "over the cap: closed without a challenge";
  Client::Outcome o = good.Call(Method::kExists, "during", 2s);
  EXPECT_TRUE(o.transport_ok && o.result.ok()) << "an authenticated connection keeps serving";
  // The silent two are closed at their deadline; new clients get in.
  EXPECT_EQ(::recv(silent1.get(), &byte, 1, 0), 0);
  EXPECT_EQ(::recv(silent2.get(), &byte, 1, 0), 0);
  ASSERT_TRUE(Eventually([&] { return server_->connections() == 1; }, 5s));
  Client fresh(endpoint_, 0us, 2, key);
  o = fresh.Call(Method::kExists, "after", 2s);
  EXPECT_TRUE(o.transport_ok && o.result.ok()) << o.result.status().ToString();
  EXPECT_EQ(server_->refused(), 4u);  // Unread request, cap, two deadlines.
  EXPECT_EQ(calls_.load(), 3) << "no handler ran for a stranger";
}

TEST(FastLaneLimitsTest, ZeroLimitsAreRefused) {
  for (ServerLimits l : {ServerLimits{0, 1, 1s}, ServerLimits{1, 0, 1s}, ServerLimits{1, 1, 0s}}) {
    auto s = Server::Start(
        HostPort{"127.0.0.1", 0}, [](Method, std::string_view, Responder) {}, l);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST_F(FastLaneServerTest, ConnectionsOverTheCapFailSoTheClientFallsBack) {
  Start(1);
  UniqueFd hold = Raw();  // Takes the only slot.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server_->connections() < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  Client c(endpoint_, 0us, 2);
  Client::Outcome o = c.Call(Method::kExists, "k", 2s);
  EXPECT_FALSE(o.transport_ok) << "an over-cap connection must fail, not hang";
}

TEST_F(FastLaneServerTest, StopsWithIdleAndBusyConnectionsAndDeadServerFailsCalls) {
  Start();
  Client c(endpoint_, 0us, 4);
  ASSERT_TRUE(c.Call(Method::kExists, "warm", 2s).result.ok());  // Leaves an idle connection.
  std::thread blocked([&] { (void)c.Call(Method::kGetStart, "block", 10s); });
  while (calls_.load() < 2) {
    std::this_thread::sleep_for(1ms);
  }
  std::thread stopper([&] { server_.reset(); });
  std::this_thread::sleep_for(20ms);
  release_ = true;  // The destructor waits for the running handler.
  stopper.join();
  blocked.join();
  Client::Outcome o = c.Call(Method::kExists, "after", 2s);
  EXPECT_FALSE(o.transport_ok) << "a call to a stopped server is a lane failure";
  c.Reset();
  EXPECT_FALSE(c.Call(Method::kExists, "after", 2s).transport_ok);
}

}  // namespace
}  // namespace sluice::internal::fastlane
