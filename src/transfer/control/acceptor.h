// Accepts connections on the engine's listening socket (on one loop) and
// hands each to a callback.
#ifndef SLUICE_TRANSFER_CONTROL_ACCEPTOR_H_
#define SLUICE_TRANSFER_CONTROL_ACCEPTOR_H_

#include <functional>
#include <string>

#include "transfer/control/event_loop.h"

namespace sluice::internal {

class Acceptor final : public IoHandler {
 public:
  using OnAccept = std::function<void(UniqueFd fd, std::string peer)>;
  Acceptor(UniqueFd listen_fd, OnAccept on_accept)
      : fd_(std::move(listen_fd)), on_accept_(std::move(on_accept)) {}

  int fd() const override { return fd_.get(); }
  void OnEvents(std::uint32_t events) override;

 private:
  UniqueFd fd_;
  OnAccept on_accept_;
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_CONTROL_ACCEPTOR_H_
