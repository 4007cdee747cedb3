// The Exchange handed to handlers: every call is posted to its session's
// strand through the server's gate, so it is safe from any thread and a
// no-op once the server or the connection is gone.
#include <boost/asio/post.hpp>

#include "common/mutex.h"
#include "http/session.h"

namespace sluice::http::internal {
namespace {

class ExchangeImpl final : public Exchange {
 public:
  ExchangeImpl(std::weak_ptr<Session> session, std::shared_ptr<Gate> gate, std::uint64_t seq)
      : session_(std::move(session)), gate_(std::move(gate)), seq_(seq) {}

  void Respond(Response response) override {
    Run([r = std::move(response)](Session& s, std::uint64_t seq) mutable {
      s.DoRespond(seq, std::move(r));
    });
  }
  void StartStream(int status, std::string content_type, Headers headers,
                   std::string keepalive) override {
    Run([=](Session& s, std::uint64_t seq) mutable {
      s.DoStartStream(seq, status, std::move(content_type), std::move(headers),
                      std::move(keepalive));
    });
  }
  void Send(std::string data) override {
    Run([d = std::move(data)](Session& s, std::uint64_t seq) mutable {
      s.DoSend(seq, std::move(d));
    });
  }
  void End() override {
    Run([](Session& s, std::uint64_t seq) { s.DoEnd(seq); });
  }
  void OnClose(std::function<void()> fn) override {
    Run([fn = std::move(fn)](Session& s, std::uint64_t seq) mutable {
      s.DoOnClose(seq, std::move(fn));
    });
  }
  void Post(std::function<void()> fn) override {
    Run([fn = std::move(fn)](Session& s, std::uint64_t) {
      if (!s.closed()) {
        fn();
      }
    });
  }
  void After(std::chrono::milliseconds delay, std::function<void()> fn) override {
    Run([delay, fn = std::move(fn)](Session& s, std::uint64_t seq) mutable {
      s.DoAfter(seq, delay, std::move(fn));
    });
  }
  void RunBlocking(std::function<void()> fn) override {
    ReaderLock lock(gate_->mu);
    if (gate_->open) {
      net::post(*gate_->blocking, std::move(fn));
    }
  }

 private:
  template <typename F>
  void Run(F&& f) {
    ReaderLock lock(gate_->mu);
    if (!gate_->open) {
      return;
    }
    std::shared_ptr<Session> s = session_.lock();
    if (s == nullptr) {
      return;
    }
    net::any_io_executor ex = s->executor();
    net::post(ex, [s = std::move(s), seq = seq_, f = std::forward<F>(f)]() mutable { f(*s, seq); });
  }

  std::weak_ptr<Session> session_;
  std::shared_ptr<Gate> gate_;
  std::uint64_t seq_;
};

}  // namespace

std::shared_ptr<Exchange> MakeExchange(std::weak_ptr<Session> session, std::shared_ptr<Gate> gate,
                                       std::uint64_t seq) {
  return std::make_shared<ExchangeImpl>(std::move(session), std::move(gate), seq);
}

}  // namespace sluice::http::internal
