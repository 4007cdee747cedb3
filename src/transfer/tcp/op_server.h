// tcp's half of a target's control-plane connection (conn_half.h): serves
// the initiator's reads and writes against this engine's region table.
// Every op is validated (key, bounds, access) before memory is touched; a
// write's payload is read straight into the region; device memory goes
// through the half's staging slots.
#ifndef SLUICE_TRANSFER_TCP_OP_SERVER_H_
#define SLUICE_TRANSFER_TCP_OP_SERVER_H_

#include <memory>

#include "transfer/control/conn_half.h"
#include "transfer/tcp/device_staging.h"
#include "transfer/transport.h"

namespace sluice::internal {

class TcpOpServer final : public ConnHalf {
 public:
  // `conn` outlives this half (it owns it); `ctx`'s pointers outlive it.
  TcpOpServer(ConnPort* conn, const ServeContext& ctx) : conn_(conn), ctx_(ctx) {}

  bool Claims(FrameType type) const override {
    return type == FrameType::kWriteReq || type == FrameType::kReadReq;
  }
  Status OnHeader(const WireHeader& h, FrameConn::Sink* sink, std::uint64_t* follow) override;
  Status OnFrame(const WireHeader& h, std::string_view body) override;
  Result<bool> FillPayload(FrameConn::OutFrame& frame) override;
  void OnFrameReleased(const FrameConn::OutFrame& frame) override;
  void OnClosed(const Status& why) override;

 private:
  void SendStatus(FrameType type, std::uint64_t id, const Status& s);
  // The half's staging for an op of `len` bytes on a device region, made
  // at the first one. Errors: the backend's; kInvalidArgument when `len`
  // exceeds a slot (the initiator must slice finer).
  Status EnsureStaging(std::uint64_t len);

  ConnPort* const conn_;
  const ServeContext ctx_;
  // The write being received: its pinned region, or the reason it was refused.
  LocalRegion* write_region_ = nullptr;
  Status write_error_;
  char* write_device_dst_ = nullptr;  // A write into device memory: staged in recv_slot().
  std::unique_ptr<DeviceStaging> staging_;
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_TCP_OP_SERVER_H_
