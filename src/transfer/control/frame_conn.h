// A framed, non-blocking TCP connection owned by one EventLoop. Reads are
// buffered for headers and small bodies; a payload bound for registered
// memory is read straight into it with readv (the tail of the read lands in
// the header buffer, so the next frame costs no extra syscall). Writes are
// gathered with sendmsg over up to 64 iovecs: header, body and payload of
// several frames in one call, payloads sent from where they live.
//
// Subclasses (the control plane's client and server connections) decide per
// header where the following bytes go, and act on whole frames. Everything
// runs on the loop thread.
//
// Once the handshake gives it a FrameSeal (StartSealing), every frame is
// sealed on its way out and checked on its way in (frame_seal.h): a body
// frame before OnFrame, a payload frame's header before OnHeader and its
// encrypted payload, decrypted in place where it landed, before OnFrame.
// Encrypted payload from memory this end does not own goes out through one
// of two reused send buffers (grown to the largest frame, pre-faulted).
#ifndef SLUICE_TRANSFER_CONTROL_FRAME_CONN_H_
#define SLUICE_TRANSFER_CONTROL_FRAME_CONN_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/net.h"
#include "transfer/control/event_loop.h"
#include "transfer/frame_seal.h"
#include "transfer/wire.h"

namespace sluice::internal {

class FrameConn : public IoHandler, public std::enable_shared_from_this<FrameConn> {
 public:
  // The read buffer (headers, bodies, drained payload), and the reads one
  // readiness event takes at most: then other connections on the loop get
  // their turn, and level-triggered epoll brings this one back.
  static constexpr std::size_t kInBufSize = 64 * 1024;
  static constexpr int kReadRounds = 64;

  FrameConn(UniqueFd fd, EventLoop* loop, std::string peer, std::chrono::milliseconds timeout);
  ~FrameConn() override;

  int fd() const override { return fd_.get(); }
  void OnEvents(std::uint32_t events) override;
  void OnTick(Clock::time_point now) override;
  void OnLoopStop() override;

  EventLoop* loop() const { return loop_; }
  const std::string& peer() const { return peer_; }

  // Where the bytes that follow a header go.
  struct Sink {
    enum class Kind : std::uint8_t { kBody, kMemory, kDrain };
    Kind kind = Kind::kBody;
    char* dst = nullptr;  // kMemory: advanced as bytes land.
  };
  struct OutFrame {
    WireHeader hdr;
    std::string body;
    const char* payload = nullptr;
    std::uint64_t payload_len = 0;
    void* cookie = nullptr;  // For whoever queued it, in OnFrameReleased.
    // The transport half that queued it (conn_half.h); null: the
    // connection's own frame.
    const void* owner = nullptr;
    // The payload is not in host memory yet: FillPayload() stages it just
    // before the frame's first byte is written (device memory).
    bool fill = false;
    bool staged = false;  // Set by FillPayload: `payload` is a staging slot.
    // Set by FrameConn: sealed (seal_len > 0) as the frame first goes out.
    bool seal_pending = false;
    std::uint8_t seal_len = 0;
    std::array<std::uint8_t, FrameSeal::kMaxSealBytes> seal{};
    char* cipher = nullptr;  // Encrypted payload in a send buffer, if any.
  };

 protected:
  // Validates `h` and says how many bytes follow it (`*follow`) and where
  // they go. A non-OK status closes the connection with that reason.
  virtual Status OnHeader(const WireHeader& h, Sink* sink, std::uint64_t* follow) = 0;
  // The whole frame has arrived; `body` holds kBody bytes (else empty).
  virtual Status OnFrame(const WireHeader& h, std::string_view body) = 0;
  // The connection closed (once). Fail pending work with `why`.
  virtual void OnClosed(const Status& why) = 0;
  // Work is outstanding that the peer must answer (for the stall timeout).
  virtual bool AwaitingPeer() const = 0;
  // A queued frame was sent whole, or dropped when the connection closed.
  virtual void OnFrameReleased(const OutFrame& /*frame*/) {}
  // Makes `frame.payload` host memory (frame.fill is set): answers true when
  // done (clearing fill), false when it cannot yet (Flush sends what is
  // ahead and tries again once a frame is released). A subclass may turn
  // the frame into another (an error response) and answer true. An error
  // closes the connection.
  virtual Result<bool> FillPayload(OutFrame& /*frame*/) { return true; }

  // Queues a frame; Flush() writes what the socket takes.
  void Queue(OutFrame frame) {
    frame.seal_pending = seal_ != nullptr;
    out_.push_back(std::move(frame));
  }
  void Flush();
  void Send(OutFrame frame) {
    Queue(std::move(frame));
    Flush();
  }
  // Closes once every queued frame is written (handshake rejections).
  void CloseAfterFlush(Status why);
  void Close(const Status& why);
  bool closed() const { return closed_; }
  void Watch(std::uint32_t events);  // First registration with the loop.
  // Seals every frame queued from now on and checks every frame whose
  // header arrives from now on (the handshake's frames go before).
  void StartSealing(std::unique_ptr<FrameSeal> seal) { seal_ = std::move(seal); }

 private:
  bool ConsumeBuffered();
  bool BeginFrame();
  bool EndFrame();
  void OnReadable();
  bool TakeBytes(const char* src, std::size_t n);
  std::size_t header_bytes() const {
    return sizeof(WireHeader) + (seal_ != nullptr ? seal_->bytes() : 0);
  }
  // Makes `f` ready to write: its payload filled (FillPayload), then
  // sealed; false when a staging slot or send buffer is not free yet.
  Result<bool> Prepare(OutFrame& f);
  // Seals `f` (encrypting its payload into a send buffer when it must):
  // false when no send buffer is free yet.
  Result<bool> SealFrame(OutFrame& f);
  void ReleaseFrame(const OutFrame& f);

  UniqueFd fd_;
  EventLoop* loop_;
  std::string peer_;
  std::chrono::milliseconds timeout_;
  bool closed_ = false;
  bool want_out_ = false;
  bool close_after_flush_ = false;
  Status close_reason_;
  Clock::time_point last_progress_;

  // Read side.
  std::unique_ptr<char[]> in_;
  std::size_t in_pos_ = 0;
  std::size_t in_len_ = 0;
  bool in_frame_ = false;  // Header parsed, following bytes pending.
  WireHeader cur_;
  std::array<std::uint8_t, FrameSeal::kMaxSealBytes> cur_seal_{};
  std::uint64_t cur_number_ = 0;     // cur_'s frame number (payload frames).
  char* cur_payload_ = nullptr;      // Where cur_'s payload landed (kMemory).
  std::unique_ptr<FrameSeal> seal_;  // Null: frames are not sealed.
  struct CipherBuf {
    std::vector<char> bytes;  // Grown (zero-filled: faulted) while free.
    bool busy = false;
  };
  std::array<CipherBuf, 2> cipher_bufs_;
  Sink sink_;
  std::uint64_t follow_left_ = 0;
  std::string body_;

  // Write side.
  std::deque<OutFrame> out_;
  std::uint64_t out_sent_ = 0;  // Bytes of out_.front() already written.
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_CONTROL_FRAME_CONN_H_
