#include "transfer/control/frame_conn.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>

#include "common/log.h"

namespace sluice::internal {

FrameConn::FrameConn(UniqueFd fd, EventLoop* loop, std::string peer,
                     std::chrono::milliseconds timeout)
    : fd_(std::move(fd)),
      loop_(loop),
      peer_(std::move(peer)),
      timeout_(timeout),
      last_progress_(Clock::now()),
      in_(new char[kInBufSize]) {}

FrameConn::~FrameConn() = default;

void FrameConn::Watch(std::uint32_t events) {
  loop_->Add(shared_from_this(), events);
}

void FrameConn::OnEvents(std::uint32_t events) {
  if (closed_) {
    return;
  }
  if ((events & EPOLLIN) != 0) {
    OnReadable();
  }
  if (!closed_ && (events & EPOLLOUT) != 0) {
    Flush();
  }
  if (!closed_ && (events & (EPOLLERR | EPOLLHUP)) != 0 && (events & EPOLLIN) == 0) {
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    Close(ErrnoStatus("connection to " + peer_ + " failed", err != 0 ? err : ECONNRESET));
  }
}

void FrameConn::OnTick(Clock::time_point now) {
  if (closed_) {
    return;
  }
  const bool waiting = in_frame_ || !out_.empty() || AwaitingPeer();
  if (!waiting) {
    last_progress_ = now;
    return;
  }
  if (now - last_progress_ > timeout_) {
    std::string what;
    if (in_frame_) {
      what = std::to_string(follow_left_) + " bytes of a frame still to read";
    }
    if (!out_.empty()) {
      what += std::string(what.empty() ? "" : ", ") + std::to_string(out_.size()) +
              " frames not yet written (" + std::to_string(out_sent_) + " bytes of the first sent)";
    }
    if (what.empty()) {
      what = "an answer awaited";
    }
    Close(DeadlineExceededError("peer " + peer_ + " made no progress for " +
                                    std::to_string(timeout_.count()) + " ms (" + what + ")",
                                FailureScope::kEndpoint));
  }
}

void FrameConn::OnLoopStop() {
  Close(Status(StatusCode::kCancelled, "transfer engine is shutting down"));
}

namespace {

// Payload bytes into registered memory (a region an op writes, or a read's
// destination). Its own frame so that ThreadSanitizer's suppression of
// cross-connection payload copies (scripts/tsan.supp) names exactly this.
[[gnu::noinline]] void CopyPayloadIntoRegion(char* dst, const char* src, std::size_t n) {
  std::memcpy(dst, src, n);
}

// The same, straight from the socket: the payload into `iov[0]` (registered
// memory), any bytes after it into `iov[1]` (the connection's buffer).
[[gnu::noinline]] ssize_t ReadPayloadIntoRegion(int fd, iovec* iov) {
  return ::readv(fd, iov, 2);
}

}  // namespace

bool FrameConn::TakeBytes(const char* src, std::size_t n) {
  switch (sink_.kind) {
    case Sink::Kind::kBody:
      body_.append(src, n);
      break;
    case Sink::Kind::kMemory:
      CopyPayloadIntoRegion(sink_.dst, src, n);
      sink_.dst += n;
      break;
    case Sink::Kind::kDrain:
      break;
  }
  follow_left_ -= n;
  return follow_left_ > 0 || EndFrame();
}

bool FrameConn::BeginFrame() {
  std::memcpy(&cur_, in_.get() + in_pos_, sizeof(WireHeader));
  in_pos_ += sizeof(WireHeader);
  if (cur_.magic != kWireMagic) {
    Close(InvalidArgumentError("malformed frame from " + peer_ + ": bad magic"));
    return false;
  }
  if (seal_ != nullptr) {
    std::memcpy(cur_seal_.data(), in_.get() + in_pos_, seal_->bytes());
    in_pos_ += seal_->bytes();
    if (CarriesPayload(cur_)) {  // The header is checked before a byte lands.
      Result<std::uint64_t> n = seal_->Check(cur_, cur_seal_.data(), {});
      if (!n.ok()) {
        Close(n.status().WithContext("frame from " + peer_));
        return false;
      }
      cur_number_ = *n;
    }
  }
  sink_ = Sink{};
  body_.clear();
  std::uint64_t follow = 0;
  Status s = OnHeader(cur_, &sink_, &follow);
  if (!s.ok()) {
    Close(s);
    return false;
  }
  if (closed_) {
    return false;
  }
  cur_payload_ = sink_.kind == Sink::Kind::kMemory ? sink_.dst : nullptr;
  follow_left_ = follow;
  in_frame_ = true;
  return follow > 0 || EndFrame();
}

bool FrameConn::EndFrame() {
  in_frame_ = false;
  if (seal_ != nullptr) {
    Status checked;
    if (!CarriesPayload(cur_)) {
      checked = seal_->Check(cur_, cur_seal_.data(), body_).status();
    } else if (cur_payload_ != nullptr) {
      checked = seal_->OpenPayload(cur_number_, cur_, cur_seal_.data(), cur_payload_, cur_.length);
    }
    if (!checked.ok()) {
      Close(checked.WithContext("frame from " + peer_));
      return false;
    }
  }
  Status s = OnFrame(cur_, body_);
  if (!s.ok()) {
    Close(s);
  }
  return !closed_;
}

bool FrameConn::ConsumeBuffered() {
  while (!closed_) {
    const std::size_t avail = in_len_ - in_pos_;
    if (!in_frame_) {
      if (avail < header_bytes()) {
        break;
      }
      if (!BeginFrame()) {
        return false;
      }
      continue;
    }
    if (avail == 0) {
      break;
    }
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(avail, follow_left_));
    const char* src = in_.get() + in_pos_;
    in_pos_ += n;
    if (!TakeBytes(src, n)) {
      return false;
    }
  }
  if (in_pos_ == in_len_) {
    in_pos_ = in_len_ = 0;
  } else if (in_pos_ > 0 && in_len_ > kInBufSize / 2) {
    std::memmove(in_.get(), in_.get() + in_pos_, in_len_ - in_pos_);
    in_len_ -= in_pos_;
    in_pos_ = 0;
  }
  return !closed_;
}

void FrameConn::OnReadable() {
  // Bounded so one busy connection cannot starve others on this loop.
  for (int round = 0; round < kReadRounds && !closed_; ++round) {
    if (!ConsumeBuffered()) {
      return;
    }
    ssize_t n;
    std::uint64_t direct = 0;
    if (in_frame_ && sink_.kind == Sink::Kind::kMemory && in_pos_ == in_len_) {
      // Payload straight into registered memory; any excess into the buffer.
      direct = follow_left_;
      iovec iov[2] = {{sink_.dst, static_cast<std::size_t>(direct)}, {in_.get(), kInBufSize}};
      in_pos_ = in_len_ = 0;
      n = ReadPayloadIntoRegion(fd_.get(), iov);
    } else {
      n = ::recv(fd_.get(), in_.get() + in_len_, kInBufSize - in_len_, 0);
    }
    if (n == 0) {
      Close(UnavailableError("peer " + peer_ + " closed the connection", FailureScope::kEndpoint));
      return;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return;
      }
      if (errno == EINTR) {
        continue;
      }
      Close(ErrnoStatus("read from " + peer_, errno));
      return;
    }
    last_progress_ = Clock::now();
    auto got = static_cast<std::uint64_t>(n);
    if (direct > 0) {
      const std::uint64_t into_dst = std::min(got, direct);
      sink_.dst += into_dst;
      follow_left_ -= into_dst;
      in_len_ = static_cast<std::size_t>(got - into_dst);
      if (follow_left_ == 0 && !EndFrame()) {
        return;
      }
    } else {
      in_len_ += static_cast<std::size_t>(got);
    }
  }
  // Out of rounds: what the last read buffered is taken now. The socket may
  // hold nothing more, and then no event would come for these bytes (a
  // frame's tail left here stalled the connection until its timeout).
  if (!closed_) {
    ConsumeBuffered();
  }
}

void FrameConn::Flush() {
  while (!closed_ && !out_.empty()) {
    iovec iov[64];
    int cnt = 0;
    std::uint64_t skip = out_sent_;
    for (auto it = out_.begin(); it != out_.end() && cnt + 4 <= 64; ++it) {
      Result<bool> ready = Prepare(*it);
      if (!ready.ok()) {
        Close(ready.status());
        return;
      }
      if (!*ready) {
        break;  // Sent once a slot or buffer of a frame ahead is back.
      }
      const char* payload = it->cipher != nullptr ? it->cipher : it->payload;
      const std::pair<const void*, std::uint64_t> parts[4] = {{&it->hdr, sizeof(WireHeader)},
                                                              {it->seal.data(), it->seal_len},
                                                              {it->body.data(), it->body.size()},
                                                              {payload, it->payload_len}};
      for (const auto& [p, len] : parts) {
        if (len <= skip) {
          skip -= len;
          continue;
        }
        iov[cnt++] = {const_cast<char*>(static_cast<const char*>(p)) + skip,
                      static_cast<std::size_t>(len - skip)};
        skip = 0;
      }
    }
    if (cnt == 0) {  // Nothing ahead holds a slot or buffer: none will come back.
      Close(InternalError("connection to " + peer_ + ": no staging slot for its next frame"));
      return;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(cnt);
    const ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!want_out_) {
          want_out_ = true;
          loop_->Modify(this, EPOLLIN | EPOLLOUT);
        }
        return;
      }
      if (errno == EINTR) {
        continue;
      }
      Close(ErrnoStatus("write to " + peer_, errno));
      return;
    }
    last_progress_ = Clock::now();
    std::uint64_t done = out_sent_ + static_cast<std::uint64_t>(n);
    while (!out_.empty()) {
      const OutFrame& f = out_.front();
      const std::uint64_t total = sizeof(WireHeader) + f.seal_len + f.body.size() + f.payload_len;
      if (done < total) {
        break;
      }
      done -= total;
      OutFrame sent = std::move(out_.front());
      out_.pop_front();
      ReleaseFrame(sent);
    }
    out_sent_ = done;
  }
  if (closed_) {
    return;
  }
  if (want_out_) {
    want_out_ = false;
    loop_->Modify(this, EPOLLIN);
  }
  if (close_after_flush_) {
    Close(close_reason_);
  }
}

Result<bool> FrameConn::Prepare(OutFrame& f) {
  if (f.fill) {
    SLUICE_ASSIGN_OR_RETURN(const bool filled, FillPayload(f));
    if (!filled) {
      return false;
    }
    f.fill = false;
  }
  return f.seal_pending ? SealFrame(f) : Result<bool>(true);
}

Result<bool> FrameConn::SealFrame(OutFrame& f) {
  char* cipher = nullptr;
  if (seal_->encrypts() && CarriesPayload(f.hdr) && f.payload_len > 0) {
    if (f.staged) {
      cipher = const_cast<char*>(f.payload);  // A staging slot of this end.
    } else {
      CipherBuf* buf = nullptr;
      for (CipherBuf& b : cipher_bufs_) {
        if (!b.busy) {
          buf = &b;
          break;
        }
      }
      if (buf == nullptr) {
        return false;
      }
      if (buf->bytes.size() < f.payload_len) {
        buf->bytes.resize(f.payload_len);
      }
      buf->busy = true;
      cipher = buf->bytes.data();
      f.cipher = cipher;
    }
  }
  const std::string_view body = CarriesPayload(f.hdr) ? std::string_view() : f.body;
  SLUICE_RETURN_IF_ERROR(seal_->Seal(f.hdr, body, f.payload, cipher, f.payload_len, f.seal.data()));
  f.seal_len = static_cast<std::uint8_t>(seal_->bytes());
  f.seal_pending = false;
  return true;
}

void FrameConn::ReleaseFrame(const OutFrame& f) {
  if (f.cipher != nullptr) {
    for (CipherBuf& b : cipher_bufs_) {
      if (b.bytes.data() == f.cipher) {
        b.busy = false;
      }
    }
  }
  OnFrameReleased(f);
}

void FrameConn::CloseAfterFlush(Status why) {
  close_after_flush_ = true;
  close_reason_ = std::move(why);
  Flush();
}

void FrameConn::Close(const Status& why) {
  if (closed_) {
    return;
  }
  closed_ = true;
  loop_->Remove(this);
  ::shutdown(fd_.get(), SHUT_RDWR);
  for (const OutFrame& f : out_) {
    ReleaseFrame(f);
  }
  out_.clear();
  OnClosed(why);
}

}  // namespace sluice::internal
