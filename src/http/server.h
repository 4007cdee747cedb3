// An asynchronous HTTP/1.1 server (Boost.Beast over Boost.Asio) for the
// client-facing APIs: a few I/O threads hold thousands of connections; a
// waiting request or an open event stream costs a callback, never a thread.
//
// Every limit is enforced before the request reaches a handler, answered in
// OpenAI's error shape and followed by closing the connection:
//   headers larger than max_header_bytes        431
//   a body (declared or sent) over max_body_bytes 413, before it is read
//   malformed HTTP                               400
//   more than max_connections open               503 (then closed)
// A connection with no request for idle_timeout, or whose request does not
// arrive whole within request_timeout of its first byte, is closed without
// an answer. Unknown paths answer 404 and unknown methods 405 (with Allow).
// CORS (off unless cors_origins is set): OPTIONS preflights are answered and
// responses to allowed origins carry Access-Control-Allow-Origin.
#ifndef SLUICE_HTTP_SERVER_H_
#define SLUICE_HTTP_SERVER_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sluice/status.h"

#include "http/message.h"
#include "http/router.h"

namespace sluice::http {

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks one.
  int io_threads = 2;
  int blocking_threads = 2;  // For Exchange::RunBlocking.
  std::size_t max_header_bytes = 16 << 10;
  std::size_t max_body_bytes = 16 << 20;
  std::size_t max_connections = 10000;
  std::chrono::milliseconds idle_timeout{60000};     // Keep-alive with no request.
  std::chrono::milliseconds request_timeout{10000};  // First byte to whole request.
  std::chrono::milliseconds write_timeout{60000};    // One response or chunk write.
  // An open stream with nothing to send writes its keep-alive text this
  // often.
  std::chrono::milliseconds stream_keepalive{15000};
  // Share the port with other processes (SO_REUSEPORT); off: a port in use
  // is an error.
  bool reuse_port = false;
  // Origins allowed cross-origin ("*": any); empty: CORS off.
  std::vector<std::string> cors_origins;
  // HTTPS: the server's certificate chain and private key (PEM text, both
  // or neither; TLS 1.2 and later). Empty: plain HTTP. A client that does
  // not finish its handshake within request_timeout is dropped.
  std::string tls_cert_pem, tls_key_pem;
};

// One request's answer, handed to its handler. Thread-safe: any method may
// be called from any thread; work it runs is serialized on the connection's
// strand. Answer exactly once, with Respond, or with StartStream ... End.
// Calls after the exchange ended (answered, or the client left) do nothing.
class Exchange {
 public:
  virtual ~Exchange() = default;

  // Sends `response` and ends the exchange.
  virtual void Respond(Response response) = 0;
  // Starts a chunked response. `keepalive` (if not empty) is sent whenever
  // the stream has been quiet for ServerOptions::stream_keepalive.
  virtual void StartStream(int status, std::string content_type, Headers headers,
                           std::string keepalive) = 0;
  // One chunk of a started stream (queued, written in order; empty data is
  // ignored).
  virtual void Send(std::string data) = 0;
  // The stream's last chunk; ends the exchange.
  virtual void End() = 0;
  // `fn` runs once, on the strand, if the connection ends before the
  // exchange does: the client disconnects, or stalls a write past
  // write_timeout. It does not run when the server shuts down.
  virtual void OnClose(std::function<void()> fn) = 0;
  // Runs `fn` on the connection's strand (after the handler returns, when
  // called from it) unless the connection is gone by then.
  virtual void Post(std::function<void()> fn) = 0;
  // Runs `fn` on the strand after `delay` unless the exchange has ended.
  virtual void After(std::chrono::milliseconds delay, std::function<void()> fn) = 0;
  // Runs `fn` on the server's blocking pool (ServerOptions::
  // blocking_threads); it may answer the exchange from there.
  virtual void RunBlocking(std::function<void()> fn) = 0;
};

class Server {
 public:
  // Binds `options.listen`, then serves `router` on options.io_threads.
  // Errors: kInvalidArgument (bad option, bad address, a certificate or
  // key that does not load or match); kUnavailable (the port cannot be
  // bound: in use, no permission).
  static Result<std::unique_ptr<Server>> Start(const ServerOptions& options, Router router);
  // Stops accepting, closes every connection (OnClose callbacks do not
  // run; a pending exchange is dropped) and joins the threads.
  virtual ~Server() = default;

  // The bound "host:port".
  virtual const std::string& endpoint() const = 0;
  // Connections open now.
  virtual std::size_t connections() const = 0;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_SERVER_H_
