#include "http/server.h"

#include <sys/socket.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <thread>

#include "common/log.h"
#include "common/mutex.h"
#include "common/net.h"
#include "http/session.h"

namespace sluice::http {
namespace {

using internal::net::ip::tcp;
namespace net = internal::net;
using boost::system::error_code;

class ServerImpl final : public Server {
 public:
  ServerImpl(const ServerOptions& options, Router router, std::unique_ptr<net::ssl::context> tls)
      : acceptor_(ioc_),
        retry_(ioc_),
        blocking_(static_cast<std::size_t>(options.blocking_threads)) {
    core_.options = options;
    core_.tls = std::move(tls);
    core_.router = std::move(router);
    core_.gate->blocking = &blocking_;
  }

  ~ServerImpl() override {
    {
      WriterLock lock(core_.gate->mu);
      core_.gate->open = false;
    }
    work_.reset();
    ioc_.stop();
    for (std::thread& t : threads_) {
      t.join();
    }
    blocking_.stop();
    blocking_.join();
    error_code ec;
    acceptor_.close(ec);
    // The io_context's destructor (after this body) destroys pending
    // handlers, and with them every session and its socket.
  }

  Status Listen() {
    const ServerOptions& o = core_.options;
    SLUICE_ASSIGN_OR_RETURN(sluice::internal::HostPort hp,
                            sluice::internal::ParseHostPort(o.listen, true));
    error_code ec;
    net::ip::address addr = net::ip::make_address(hp.host, ec);
    if (ec) {
      tcp::resolver resolver(ioc_);
      auto results = resolver.resolve(hp.host, std::to_string(hp.port), ec);
      if (ec || results.empty()) {
        return InvalidArgumentError("HTTP listen address '" + o.listen +
                                    "': cannot resolve host: " + ec.message());
      }
      addr = results.begin()->endpoint().address();
    }
    const tcp::endpoint ep(addr, hp.port);
    auto fail = [&](std::string_view what) {
      return UnavailableError(
          "HTTP cannot listen on " + o.listen + ": " + std::string(what) + ": " + ec.message(),
          FailureScope::kTransport);
    };
    acceptor_.open(ep.protocol(), ec);
    if (ec) {
      return fail("socket");
    }
    acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (o.reuse_port) {
      const int one = 1;
      if (::setsockopt(acceptor_.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) !=
          0) {
        ec = error_code(errno, boost::system::system_category());
        return fail("SO_REUSEPORT");
      }
    }
    acceptor_.bind(ep, ec);
    if (ec) {
      return fail("bind");
    }
    acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return fail("listen");
    }
    const tcp::endpoint bound = acceptor_.local_endpoint(ec);
    sluice::internal::HostPort out{hp.host, bound.port()};
    endpoint_ = out.ToString();
    return Status::Ok();
  }

  void Run() {
    Accept();
    for (int i = 0; i < core_.options.io_threads; ++i) {
      threads_.emplace_back([this] {
        // An exception from a posted function (see Session::Dispatch for
        // handlers) is logged and the loop goes on.
        while (true) {
          try {
            ioc_.run();
            return;
          } catch (const std::exception& e) {
            SLUICE_LOG(error, "HTTP I/O thread: {}", e.what());
          }
        }
      });
    }
  }

  const std::string& endpoint() const override { return endpoint_; }
  std::size_t connections() const override {
    return core_.connections.load(std::memory_order_relaxed);
  }

 private:
  void Accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted) {
        return;
      }
      if (ec) {
        // Out of descriptors (EMFILE) and the like: wait rather than spin.
        SLUICE_LOG(warn, "HTTP accept on {}: {}; retrying in 100 ms", endpoint_, ec.message());
        retry_.expires_after(std::chrono::milliseconds(100));
        retry_.async_wait([this](error_code wec) {
          if (!wec) {
            Accept();
          }
        });
        return;
      }
      if (core_.connections.load(std::memory_order_relaxed) >= core_.options.max_connections) {
        internal::RefuseConnection(socket, core_.tls != nullptr);
      } else {
        core_.connections.fetch_add(1, std::memory_order_relaxed);
        std::make_shared<internal::Session>(&core_, std::move(socket))->Start();
      }
      Accept();
    });
  }

  internal::Core core_;
  net::io_context ioc_;
  net::executor_work_guard<net::io_context::executor_type> work_ = net::make_work_guard(ioc_);
  tcp::acceptor acceptor_;
  net::steady_timer retry_;
  net::thread_pool blocking_;
  std::vector<std::thread> threads_;
  std::string endpoint_;
};

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options, Router router) {
  auto positive = [](std::chrono::milliseconds d) { return d.count() > 0; };
  if (options.io_threads < 1 || options.io_threads > 256 || options.blocking_threads < 1 ||
      options.blocking_threads > 256) {
    return InvalidArgumentError("HTTP server: io_threads and blocking_threads must be in 1..256");
  }
  if (options.max_header_bytes < 1024 || options.max_connections < 1) {
    return InvalidArgumentError(
        "HTTP server: max_header_bytes must be at least 1024, max_connections at least 1");
  }
  if (!positive(options.idle_timeout) || !positive(options.request_timeout) ||
      !positive(options.write_timeout) || !positive(options.stream_keepalive)) {
    return InvalidArgumentError("HTTP server: timeouts must be positive");
  }
  std::unique_ptr<net::ssl::context> tls;
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return InvalidArgumentError("HTTP server: a TLS certificate needs its key and the reverse");
  }
  if (!options.tls_cert_pem.empty()) {
    tls = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
    error_code ec;
    tls->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                         net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                         net::ssl::context::no_tlsv1_1 | net::ssl::context::single_dh_use,
                     ec);
    if (!ec) {
      tls->use_certificate_chain(net::buffer(options.tls_cert_pem), ec);
    }
    if (ec) {
      return InvalidArgumentError("HTTP server: the TLS certificate does not load: " +
                                  ec.message());
    }
    tls->use_private_key(net::buffer(options.tls_key_pem), net::ssl::context::pem, ec);
    if (ec && ec.message().find("mismatch") != std::string::npos) {
      return InvalidArgumentError("HTTP server: the TLS key is not the certificate's");
    }
    if (ec) {
      return InvalidArgumentError("HTTP server: the TLS key does not load: " + ec.message());
    }
  }
  auto server = std::make_unique<ServerImpl>(options, std::move(router), std::move(tls));
  SLUICE_RETURN_IF_ERROR(server->Listen());
  server->Run();
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace sluice::http
