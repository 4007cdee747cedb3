// Pinned host buffers one tcp session moves device memory through: a
// receive slot (the payload of one incoming frame lands there, then is
// copied to the device) and a few send slots (a device range is copied into
// one just before its frame is first written, and the slot comes back when
// the frame is sent or dropped). Made at a session's first device op and
// reused for its life: no allocation per op. Copies run synchronously on
// the session's loop thread with the backend's stream and event.
#ifndef SLUICE_TRANSFER_TCP_DEVICE_STAGING_H_
#define SLUICE_TRANSFER_TCP_DEVICE_STAGING_H_

#include <chrono>
#include <memory>
#include <vector>

#include "sluice/status.h"

#include "device/backend.h"

namespace sluice::internal {

class DeviceStaging {
 public:
  // `slot_size` bytes per slot, `send_slots` (1..16) send slots; copies wait
  // at most `timeout`. Errors: the backend's (pinned memory, stream, event).
  static Result<std::unique_ptr<DeviceStaging>> Create(device::DeviceBackend* backend,
                                                       std::size_t slot_size, int send_slots,
                                                       std::chrono::milliseconds timeout);
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  std::size_t slot_size() const { return slot_size_; }
  char* recv_slot() const { return recv_; }
  // A free send slot, or null when every one is in a frame not yet sent.
  char* TakeSendSlot();
  void ReturnSendSlot(char* slot);

  // Copies `len` bytes of `src` (device memory) into a free send slot and
  // answers the slot (give it back with ReturnSendSlot once its frame is
  // sent), or null when every slot is in a frame not yet sent. Errors: the
  // copy's (the slot is back already).
  Result<char*> StageOut(const void* src, std::size_t len);

  // Copies `len` bytes (either end host or device memory) and waits for it.
  // Errors: the backend's; kDeadlineExceeded after the timeout.
  Status Copy(void* dst, const void* src, std::size_t len);

 private:
  DeviceStaging(device::DeviceBackend* backend, std::size_t slot_size,
                std::chrono::milliseconds timeout)
      : backend_(backend), slot_size_(slot_size), timeout_(timeout) {}

  device::DeviceBackend* const backend_;
  const std::size_t slot_size_;
  const std::chrono::milliseconds timeout_;
  char* recv_ = nullptr;
  std::vector<char*> all_send_;
  std::vector<char*> free_send_;
  device::Stream stream_;
  device::Event event_;
  bool have_stream_ = false, have_event_ = false;
};

}  // namespace sluice::internal

#endif  // SLUICE_TRANSFER_TCP_DEVICE_STAGING_H_
