#include "http/session.h"

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <cerrno>

#include "common/log.h"

namespace sluice::http::internal {
namespace {

namespace beast = boost::beast;
using boost::system::error_code;

std::string Head(int status) {
  const auto reason = beast::http::obsolete_reason(static_cast<beast::http::status>(status));
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) + "\r\n";
}

void AppendHeader(std::string& out, std::string_view name, std::string_view value) {
  out.append(name).append(": ").append(value).append("\r\n");
}

std::string Chunk(std::string_view data) {
  char size[20];
  const int n = std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string out(size, static_cast<std::size_t>(n));
  out.append(data).append("\r\n");
  return out;
}

Request HeadOf(const beast::http::request<beast::http::string_body>& msg, std::string peer) {
  Request req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  const std::size_t q = req.target.find('?');
  req.path = req.target.substr(0, q);
  req.query = q == std::string::npos ? std::string() : req.target.substr(q + 1);
  for (const auto& f : msg) {
    req.headers.emplace_back(AsciiLower(f.name_string()), std::string(f.value()));
  }
  req.peer = std::move(peer);
  return req;
}

}  // namespace

Request ToRequest(beast::http::request<beast::http::string_body>&& msg, std::string peer) {
  Request req = HeadOf(msg, std::move(peer));
  req.body = std::move(msg.body());
  return req;
}

Session::Session(Core* core, tcp::socket socket)
    : core_(core),
      stream_(std::move(socket), core->tls.get()),
      socket_(stream_.socket()),
      deadline_(socket_.get_executor()) {
  error_code ec;
  const tcp::endpoint ep = socket_.remote_endpoint(ec);
  if (!ec) {
    peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  socket_.set_option(tcp::no_delay(true), ec);
}

Session::~Session() {
  core_->connections.fetch_sub(1, std::memory_order_relaxed);
}

void Session::Start() {
  net::post(executor(), [self = shared_from_this()] {
    if (!self->stream_.tls()) {
      return self->WaitRequest();
    }
    // A client that does not finish its handshake in time is dropped.
    self->ArmDeadline(self->core_->options.request_timeout);
    self->stream_.async_handshake([self](error_code ec) { self->OnHandshake(ec); });
  });
}

void Session::OnHandshake(error_code ec) {
  if (closed_) {
    return;
  }
  CancelDeadline();
  if (ec) {
    return Close();  // Not TLS, or no protocol or cipher in common.
  }
  WaitRequest();
}

// Idle: no buffer is held while waiting for a request's first byte.
void Session::WaitRequest() {
  phase_ = Phase::kIdle;
  if (buffer_.size() > 0) {
    return ReadHeader();  // Pipelined.
  }
  if (buffer_.capacity() > 16384) {
    buffer_.shrink_to_fit();
  }
  ArmDeadline(core_->options.idle_timeout);
  if (stream_.tls()) {
    // The TLS layer may already hold the request's records, read from the
    // socket along with the handshake or the previous request, and the
    // socket would not turn readable for them: read through it. (Its own
    // buffers are held anyway; the first bytes' buffer costs little more.)
    constexpr std::size_t kFirstRead = 4096;
    stream_.async_read_some(buffer_.prepare(kFirstRead),
                            [self = shared_from_this()](error_code ec, std::size_t n) {
                              if (self->closed_) {
                                return;
                              }
                              if (ec) {
                                return self->Close();
                              }
                              self->buffer_.commit(n);
                              self->ReadHeader();
                            });
    return;
  }
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
    if (self->closed_) {
      return;
    }
    if (ec) {
      return self->Close();
    }
    self->ReadHeader();
  });
}

void Session::ReadHeader() {
  phase_ = Phase::kReading;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(
      std::min<std::size_t>(core_->options.max_header_bytes, UINT32_MAX)));
  parser_->body_limit(core_->options.max_body_bytes);
  ArmDeadline(core_->options.request_timeout);
  beast::http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](error_code ec, std::size_t) { self->OnHeader(ec); });
}

void Session::OnHeader(error_code ec) {
  if (closed_) {
    return;
  }
  if (ec) {
    return OnReadError(ec);
  }
  const auto length = parser_->content_length();
  if (length.has_value() && *length > core_->options.max_body_bytes) {
    return OnReadError(beast::http::error::body_limit);
  }
  if (parser_->is_done()) {
    return Dispatch();
  }
  // The route's gate answers from the head (a missing API key: 401 now,
  // not after reading the body); before any 100 Continue.
  const auto& head = parser_->get();
  const std::string_view target(head.target().data(), head.target().size());
  const Router::Match route =
      core_->router.Find(std::string_view(head.method_string().data(), head.method_string().size()),
                         target.substr(0, target.find('?')));
  if (route.gate != nullptr) {
    std::optional<Response> refused = (*route.gate)(HeadOf(head, peer_));
    if (refused.has_value()) {
      CancelDeadline();
      return Answer(std::move(*refused), true);
    }
  }
  if (beast::iequals(parser_->get()[beast::http::field::expect], "100-continue")) {
    Queue("HTTP/1.1 100 Continue\r\n\r\n");
  }
  beast::http::async_read(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](error_code rec, std::size_t) { self->OnBody(rec); });
}

void Session::OnBody(error_code ec) {
  if (closed_) {
    return;
  }
  if (ec) {
    return OnReadError(ec);
  }
  Dispatch();
}

void Session::OnReadError(error_code ec) {
  CancelDeadline();
  if (ec == beast::http::error::header_limit || ec == beast::http::error::buffer_overflow) {
    return Answer(ErrorResponse(431, "invalid_request_error",
                                "request headers larger than " +
                                    std::to_string(core_->options.max_header_bytes) + " bytes",
                                {}, "request_header_fields_too_large"),
                  true);
  }
  if (ec == beast::http::error::body_limit) {
    return Answer(ErrorResponse(413, "invalid_request_error",
                                "request body larger than " +
                                    std::to_string(core_->options.max_body_bytes) + " bytes",
                                {}, "request_too_large"),
                  true);
  }
  const bool started = parser_.has_value() && parser_->got_some();
  if (ec == beast::http::error::end_of_stream || ec == net::error::eof ||
      ec == net::error::operation_aborted || ec == net::error::connection_reset || !started) {
    return Close();  // The client left (or its request timed out).
  }
  Answer(ErrorResponse(400, "invalid_request_error", "malformed HTTP request: " + ec.message(), {},
                       "malformed_request"),
         true);
}

void Session::Dispatch() {
  CancelDeadline();
  auto msg = parser_->release();
  parser_.reset();
  keep_alive_ = msg.keep_alive();
  Request req = ToRequest(std::move(msg), peer_);
  origin_ = std::string(req.Header("origin"));

  ++seq_;
  exchange_done_ = false;
  streaming_ = false;
  phase_ = Phase::kHandling;
  Router::Match m = core_->router.Find(req.method, req.path);
  if (req.method == "OPTIONS" && !m.allowed.empty()) {
    std::string allow = "OPTIONS";
    for (const std::string& method : m.allowed) {
      allow += ", " + method;
    }
    Response r;
    r.status = 204;
    r.content_type.clear();
    r.headers.emplace_back("Allow", allow);
    if (!req.Header("access-control-request-method").empty()) {
      Headers cors;
      AddCors(cors);
      if (!cors.empty()) {
        r.headers.insert(r.headers.end(), cors.begin(), cors.end());
        r.headers.emplace_back("Access-Control-Allow-Methods", allow);
        r.headers.emplace_back("Access-Control-Allow-Headers",
                               "Authorization, Content-Type, Last-Event-ID");
        r.headers.emplace_back("Access-Control-Max-Age", "600");
      }
    }
    return DoRespond(seq_, std::move(r));
  }
  if (m.allowed.empty()) {
    return DoRespond(
        seq_, ErrorResponse(404, "invalid_request_error", "no route " + req.method + " " + req.path,
                            {}, "not_found"));
  }
  if (m.handler == nullptr) {
    std::string allow;
    for (const std::string& method : m.allowed) {
      allow += (allow.empty() ? "" : ", ") + method;
    }
    Response r =
        ErrorResponse(405, "invalid_request_error",
                      req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")",
                      {}, "method_not_allowed");
    r.headers.emplace_back("Allow", allow);
    return DoRespond(seq_, std::move(r));
  }
  req.params = std::move(m.params);
  auto exchange = MakeExchange(weak_from_this(), core_->gate, seq_);
  // Handlers return Status, but a library they call may throw (nlohmann's
  // json, allocation): answer 500 and keep serving rather than let it end
  // the I/O thread.
  try {
    (*m.handler)(req, std::move(exchange));
  } catch (const std::exception& e) {
    SLUICE_LOG(error, "HTTP handler for {} {} threw: {}", req.method, req.path, e.what());
    if (!exchange_done_ && !streaming_) {
      return DoRespond(seq_,
                       ErrorResponse(500, "server_error", "internal error", {}, "internal_error"));
    }
  }
  // Bytes already buffered are a pipelined request: the client is there.
  if (!exchange_done_ && !watching_ && buffer_.size() == 0) {
    StartWatch();
  }
}

bool Session::ExchangeOpen(std::uint64_t seq) const {
  return !closed_ && seq == seq_ && !exchange_done_;
}

void Session::EndExchange() {
  exchange_done_ = true;
  on_close_ = nullptr;
  for (auto& t : timers_) {
    t->cancel();
  }
  timers_.clear();
  if (keepalive_timer_.has_value()) {
    keepalive_timer_->cancel();
    keepalive_timer_.reset();
  }
}

// While a handler owes the answer, a readable socket means the client
// either left (EOF, reset) or pipelined its next request.
void Session::StartWatch() {
  watching_ = true;
  socket_.async_wait(tcp::socket::wait_read,
                     [self = shared_from_this()](error_code ec) { self->OnWatch(ec); });
}

void Session::OnWatch(error_code ec) {
  watching_ = false;
  if (closed_) {
    return;
  }
  if (phase_ == Phase::kIdle) {
    // The answer went out; this is the next request (over TLS, the watch
    // was ended and the request may be in the TLS layer already).
    return stream_.tls() ? WaitRequest() : ReadHeader();
  }
  if (phase_ != Phase::kHandling && phase_ != Phase::kStreaming) {
    return;  // Writing: AfterAnswer goes on from here.
  }
  char c = 0;
  const ssize_t n = ec ? -1 : ::recv(socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && !ec && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    return StartWatch();
  }
  if (n > 0) {
    if (stream_.tls()) {
      // Over TLS the bytes may be the client's close_notify, not a request:
      // only the TLS layer can tell.
      return WatchThroughTls();
    }
    return;  // A pipelined request: read once this exchange ends.
  }
  Close();  // The client left: OnClose runs.
}

// Reads what the watch saw through the TLS layer: an end of the session
// (close_notify, a truncated or reset connection) closes it, so OnClose
// runs now and not when the answer is written; a request stays buffered
// for when this exchange ends (or is read now, if it has ended meanwhile).
// The only read pending on the stream while it runs: AfterAnswer and
// Linger leave it be, WaitRequest does not start another.
void Session::WatchThroughTls() {
  watching_ = true;
  tls_watch_read_ = true;
  constexpr std::size_t kWatchRead = 4096;
  stream_.async_read_some(buffer_.prepare(kWatchRead),
                          [self = shared_from_this()](error_code ec, std::size_t n) {
                            self->watching_ = false;
                            self->tls_watch_read_ = false;
                            if (self->closed_ || self->lingering_) {
                              return;
                            }
                            if (ec) {
                              return self->Close();  // The client left: OnClose runs.
                            }
                            self->buffer_.commit(n);
                            if (self->phase_ == Phase::kIdle) {
                              self->ReadHeader();  // The answer went out meanwhile.
                            }
                          });
}

void Session::DoRespond(std::uint64_t seq, Response r) {
  if (!ExchangeOpen(seq) || streaming_) {
    return;
  }
  EndExchange();
  Answer(std::move(r), !keep_alive_);
}

void Session::Answer(Response r, bool close) {
  phase_ = Phase::kWriting;
  close_after_ = close;
  std::string head = Head(r.status);
  if (!r.content_type.empty()) {
    AppendHeader(head, "Content-Type", r.content_type);
  }
  if (r.status != 204 && r.status != 304) {
    AppendHeader(head, "Content-Length", std::to_string(r.body.size()));
  }
  for (const auto& [k, v] : r.headers) {
    AppendHeader(head, k, v);
  }
  Headers cors;
  AddCors(cors);
  for (const auto& [k, v] : cors) {
    AppendHeader(head, k, v);
  }
  if (close) {
    AppendHeader(head, "Connection", "close");
  }
  head += "\r\n";
  Queue(std::move(head), std::move(r.body));
}

void Session::DoStartStream(std::uint64_t seq, int status, std::string content_type,
                            Headers headers, std::string keepalive) {
  if (!ExchangeOpen(seq) || streaming_) {
    return;
  }
  streaming_ = true;
  phase_ = Phase::kStreaming;
  std::string head = Head(status);
  AppendHeader(head, "Content-Type", content_type);
  AppendHeader(head, "Transfer-Encoding", "chunked");
  for (const auto& [k, v] : headers) {
    AppendHeader(head, k, v);
  }
  Headers cors;
  AddCors(cors);
  for (const auto& [k, v] : cors) {
    AppendHeader(head, k, v);
  }
  head += "\r\n";
  Queue(std::move(head));
  keepalive_ = std::move(keepalive);
  if (!keepalive_.empty()) {
    keepalive_timer_.emplace(executor());
    KeepAlive();
  }
}

void Session::KeepAlive() {
  const auto interval = core_->options.stream_keepalive;
  keepalive_timer_->expires_after(interval);
  keepalive_timer_->async_wait([self = shared_from_this(), seq = seq_](error_code ec) {
    if (ec || !self->ExchangeOpen(seq) || !self->keepalive_timer_.has_value()) {
      return;
    }
    if (std::chrono::steady_clock::now() - self->last_write_ >=
        self->core_->options.stream_keepalive) {
      self->Queue(Chunk(self->keepalive_));
    }
    self->KeepAlive();
  });
}

void Session::DoSend(std::uint64_t seq, std::string data) {
  if (!ExchangeOpen(seq) || !streaming_ || data.empty()) {
    return;
  }
  Queue(Chunk(data));
}

void Session::DoEnd(std::uint64_t seq) {
  if (!ExchangeOpen(seq) || !streaming_) {
    return;
  }
  EndExchange();
  phase_ = Phase::kWriting;
  close_after_ = !keep_alive_;
  Queue("0\r\n\r\n");
}

void Session::DoOnClose(std::uint64_t seq, std::function<void()> fn) {
  if (ExchangeOpen(seq)) {
    on_close_ = std::move(fn);
  }
}

void Session::DoAfter(std::uint64_t seq, std::chrono::milliseconds delay,
                      std::function<void()> fn) {
  if (!ExchangeOpen(seq)) {
    return;
  }
  auto timer = std::make_shared<net::steady_timer>(executor(), delay);
  timers_.push_back(timer);
  timer->async_wait([self = shared_from_this(), seq, fn = std::move(fn)](error_code ec) {
    if (!ec && self->ExchangeOpen(seq)) {
      fn();
    }
  });
}

void Session::Queue(std::string head, std::string body) {
  out_.push_back({std::move(head), std::move(body)});
  Write();
}

void Session::Write() {
  if (writing_ || out_.empty() || closed_) {
    return;
  }
  writing_ = true;
  // While a request is read (a 100 Continue goes out) its own deadline runs.
  if (phase_ != Phase::kReading) {
    ArmDeadline(core_->options.write_timeout);
  }
  const Out& o = out_.front();
  const std::array<net::const_buffer, 2> bufs = {net::buffer(o.head), net::buffer(o.body)};
  net::async_write(stream_, bufs, [self = shared_from_this()](error_code ec, std::size_t) {
    self->OnWritten(ec);
  });
}

void Session::OnWritten(error_code ec) {
  writing_ = false;
  if (closed_) {
    return;
  }
  if (phase_ != Phase::kReading) {
    CancelDeadline();
  }
  if (ec) {
    return Close();  // The client left (or stalled past the write timeout) mid-stream.
  }
  last_write_ = std::chrono::steady_clock::now();
  out_.pop_front();
  if (!out_.empty()) {
    return Write();
  }
  if (phase_ == Phase::kWriting) {
    AfterAnswer();
  }
}

void Session::AfterAnswer() {
  if (close_after_) {
    return Linger();
  }
  if (watching_) {
    phase_ = Phase::kIdle;  // OnWatch reads the next request.
    ArmDeadline(core_->options.idle_timeout);
    if (stream_.tls() && !tls_watch_read_) {
      // The TLS layer may hold that request already, where the socket watch
      // cannot see it: end the watch now (the only socket operation pending).
      error_code ec;
      socket_.cancel(ec);
    }
    return;
  }
  WaitRequest();
}

// Half-closes, then discards what the client still sends for up to a
// second, so an answer sent before its request was read whole (413) is
// not lost to a reset.
void Session::Linger() {
  lingering_ = true;
  error_code ec;
  if (tls_watch_read_) {
    socket_.cancel(ec);  // Drain reads the socket from here on.
  }
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  buffer_.clear();
  ArmDeadline(std::chrono::milliseconds(1000));
  Drain();
}

void Session::Drain() {
  if (scratch_ == nullptr) {
    scratch_ = std::make_unique<std::array<char, 4096>>();
  }
  socket_.async_read_some(net::buffer(*scratch_),
                          [self = shared_from_this()](error_code ec, std::size_t) {
                            if (ec || self->closed_) {
                              return self->Close();
                            }
                            self->Drain();
                          });
}

void Session::ArmDeadline(std::chrono::milliseconds d) {
  const std::uint64_t gen = ++deadline_gen_;
  deadline_.expires_after(d);
  deadline_.async_wait([self = shared_from_this(), gen](error_code ec) {
    if (!ec && gen == self->deadline_gen_ && !self->closed_) {
      self->Close();
    }
  });
}

void Session::CancelDeadline() {
  ++deadline_gen_;
  deadline_.cancel();
}

// Every way a connection ends but server shutdown comes here: an exchange
// still owed an answer (or mid-stream) runs its OnClose, whatever ended it —
// the client leaving, a reset, or a write stalled past its deadline.
void Session::Close() {
  if (closed_) {
    return;
  }
  closed_ = true;
  std::function<void()> fn = exchange_done_ ? nullptr : std::move(on_close_);
  EndExchange();
  CancelDeadline();
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  out_.clear();
  if (fn) {
    fn();
  }
}

void Session::AddCors(Headers& h) const {
  const auto& allowed = core_->options.cors_origins;
  if (origin_.empty() || allowed.empty()) {
    return;
  }
  const bool any = std::find(allowed.begin(), allowed.end(), "*") != allowed.end();
  if (!any && std::find(allowed.begin(), allowed.end(), origin_) == allowed.end()) {
    return;
  }
  h.emplace_back("Access-Control-Allow-Origin", any ? "*" : origin_);
  h.emplace_back("Vary", "Origin");
  h.emplace_back("Access-Control-Expose-Headers", "Retry-After");
}

void RefuseConnection(tcp::socket& socket, bool tls) {
  static const std::string kAnswer = [] {
    const Response r = ErrorResponse(503, "server_error", "too many connections; retry later", {},
                                     "too_many_connections");
    return Head(503) +
           "Content-Type: application/json\r\nContent-Length: " + std::to_string(r.body.size()) +
           "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + r.body;
  }();
  error_code ec;
  socket.non_blocking(true, ec);
  if (!tls) {
    (void)::send(socket.native_handle(), kAnswer.data(), kAnswer.size(), MSG_NOSIGNAL);
  }
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

}  // namespace sluice::http::internal
