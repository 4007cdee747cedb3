// Internal to the HTTP server: one connection (Session), the exchange it
// hands to handlers, and what the server shares with both (Core).
#ifndef SLUICE_HTTP_SESSION_H_
#define SLUICE_HTTP_SESSION_H_

#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <deque>
#include <memory>
#include <optional>

#include "common/mutex.h"
#include "http/server.h"

namespace sluice::http::internal {

namespace net = boost::asio;
using tcp = net::ip::tcp;

// What outlives the server for exchanges still held elsewhere: posts go
// through it only while it is open (Server's destructor closes it first).
struct Gate {
  SharedMutex mu;
  bool open SLUICE_GUARDED_BY(mu) = true;
  net::thread_pool* blocking = nullptr;  // Valid while open.
};

struct Core {
  ServerOptions options;
  // With options.tls_cert_pem: the server's TLS context (null: plaintext).
  std::unique_ptr<net::ssl::context> tls;
  Router router;
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  std::atomic<std::size_t> connections{0};
};

// A parsed request as handlers see it: method, target split into path and
// query (neither decoded), header names lower-cased, the body moved out of
// `msg`, and `peer` ("host:port").
Request ToRequest(boost::beast::http::request<boost::beast::http::string_body>&& msg,
                  std::string peer);

// A connection's byte stream: the TCP socket itself, or TLS over it. Beast
// reads and writes through it; waits, peeks and shutdowns use socket().
class Stream {
 public:
  using executor_type = net::any_io_executor;
  // `tls` (null: plaintext) must outlive the stream.
  Stream(tcp::socket socket, net::ssl::context* tls) : socket_(std::move(socket)) {
    if (tls != nullptr) {
      tls_.emplace(socket_, *tls);
    }
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  executor_type get_executor() { return socket_.get_executor(); }
  tcp::socket& socket() { return socket_; }
  bool tls() const { return tls_.has_value(); }

  template <class Buffers, class Handler>
  void async_read_some(const Buffers& buffers, Handler&& handler) {
    if (tls_) {
      tls_->async_read_some(buffers, std::forward<Handler>(handler));
    } else {
      socket_.async_read_some(buffers, std::forward<Handler>(handler));
    }
  }
  template <class Buffers, class Handler>
  void async_write_some(const Buffers& buffers, Handler&& handler) {
    if (tls_) {
      tls_->async_write_some(buffers, std::forward<Handler>(handler));
    } else {
      socket_.async_write_some(buffers, std::forward<Handler>(handler));
    }
  }
  // The server's side of the TLS handshake. REQUIRES: tls().
  template <class Handler>
  void async_handshake(Handler&& handler) {
    tls_->async_handshake(net::ssl::stream_base::server, std::forward<Handler>(handler));
  }

 private:
  tcp::socket socket_;
  std::optional<net::ssl::stream<tcp::socket&>> tls_;  // Over socket_.
};

// One client connection. Every member runs on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `core` outlives every session (sessions die with the io_context).
  Session(Core* core, tcp::socket socket);
  ~Session();
  void Start();

  net::any_io_executor executor() { return stream_.get_executor(); }
  bool closed() const { return closed_; }

  // The exchange's operations, posted by ExchangeImpl; `seq` names the
  // exchange (a stale one's calls are ignored).
  void DoRespond(std::uint64_t seq, Response r);
  void DoStartStream(std::uint64_t seq, int status, std::string content_type, Headers headers,
                     std::string keepalive);
  void DoSend(std::uint64_t seq, std::string data);
  void DoEnd(std::uint64_t seq);
  void DoOnClose(std::uint64_t seq, std::function<void()> fn);
  void DoAfter(std::uint64_t seq, std::chrono::milliseconds delay, std::function<void()> fn);

 private:
  enum class Phase {
    kIdle,       // Waiting for a request's first byte.
    kReading,    // Reading a request.
    kHandling,   // A handler owes the answer.
    kStreaming,  // Sending a chunked answer.
    kWriting,    // The answer is written; then the next request (or close).
  };
  using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

  void OnHandshake(boost::system::error_code ec);
  void WaitRequest();
  void WatchThroughTls();
  void ReadHeader();
  void OnHeader(boost::system::error_code ec);
  void OnBody(boost::system::error_code ec);
  void OnReadError(boost::system::error_code ec);
  void Dispatch();
  bool ExchangeOpen(std::uint64_t seq) const;
  void EndExchange();
  void StartWatch();
  void OnWatch(boost::system::error_code ec);
  // Answers `r` (headers completed here) and, with `close`, closes after.
  void Answer(Response r, bool close);
  void Queue(std::string head, std::string body = {});
  void Write();
  void OnWritten(boost::system::error_code ec);
  void AfterAnswer();
  void Linger();
  void Drain();
  void KeepAlive();
  void ArmDeadline(std::chrono::milliseconds d);
  void CancelDeadline();
  void Close();
  // CORS headers for the current request's origin (none if not allowed).
  void AddCors(Headers& h) const;

  Core* core_;
  Stream stream_;
  tcp::socket& socket_;  // stream_'s.
  std::string peer_;
  net::steady_timer deadline_;
  std::uint64_t deadline_gen_ = 0;
  boost::beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  Phase phase_ = Phase::kIdle;
  bool closed_ = false;
  bool keep_alive_ = true;
  bool close_after_ = false;     // Close once the queue is written.
  bool watching_ = false;        // A disconnect watch is pending.
  bool tls_watch_read_ = false;  // Its TLS read (WatchThroughTls) is pending.
  bool lingering_ = false;       // Linger: only Drain reads.
  std::string origin_;           // The current request's Origin header.

  std::uint64_t seq_ = 0;      // The current exchange.
  bool exchange_done_ = true;  // Answered (or never started).
  bool streaming_ = false;     // Its answer is a stream.
  std::function<void()> on_close_;
  std::vector<std::shared_ptr<net::steady_timer>> timers_;  // The exchange's After()s.
  std::optional<net::steady_timer> keepalive_timer_;
  std::string keepalive_;
  std::chrono::steady_clock::time_point last_write_;

  struct Out {
    std::string head, body;
  };
  std::deque<Out> out_;
  bool writing_ = false;
  std::unique_ptr<std::array<char, 4096>> scratch_;  // Linger's discard buffer.
};

// The exchange handed to a handler for the session's exchange `seq`.
std::shared_ptr<Exchange> MakeExchange(std::weak_ptr<Session> session, std::shared_ptr<Gate> gate,
                                       std::uint64_t seq);

// Accept-time refusal when max_connections are open: a canned 503, best
// effort, then close (over TLS, which has no handshake yet: close only).
void RefuseConnection(tcp::socket& socket, bool tls);

}  // namespace sluice::http::internal

#endif  // SLUICE_HTTP_SESSION_H_
