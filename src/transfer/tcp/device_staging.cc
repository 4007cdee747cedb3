#include "transfer/tcp/device_staging.h"

#include <algorithm>

namespace sluice::internal {

Result<std::unique_ptr<DeviceStaging>> DeviceStaging::Create(device::DeviceBackend* backend,
                                                             std::size_t slot_size, int send_slots,
                                                             std::chrono::milliseconds timeout) {
  if (backend == nullptr || slot_size == 0 || send_slots < 1 || send_slots > 16) {
    return InvalidArgumentError("device staging: needs a backend, a slot size and 1..16 slots");
  }
  std::unique_ptr<DeviceStaging> s(new DeviceStaging(backend, slot_size, timeout));
  SLUICE_ASSIGN_OR_RETURN(void* recv, backend->AllocatePinned(slot_size));
  s->recv_ = static_cast<char*>(recv);
  for (int i = 0; i < send_slots; ++i) {
    SLUICE_ASSIGN_OR_RETURN(void* p, backend->AllocatePinned(slot_size));
    s->all_send_.push_back(static_cast<char*>(p));
  }
  s->free_send_ = s->all_send_;
  SLUICE_ASSIGN_OR_RETURN(s->stream_, backend->CreateStream(0));
  s->have_stream_ = true;
  SLUICE_ASSIGN_OR_RETURN(s->event_, backend->CreateEvent());
  s->have_event_ = true;
  return s;
}

DeviceStaging::~DeviceStaging() {
  if (have_stream_) {
    (void)backend_->DestroyStream(stream_);  // Waits for its copies first.
  }
  if (have_event_) {
    (void)backend_->DestroyEvent(event_);
  }
  if (recv_ != nullptr) {
    (void)backend_->FreePinned(recv_);
  }
  for (char* p : all_send_) {
    (void)backend_->FreePinned(p);
  }
}

char* DeviceStaging::TakeSendSlot() {
  if (free_send_.empty()) {
    return nullptr;
  }
  char* p = free_send_.back();
  free_send_.pop_back();
  return p;
}

void DeviceStaging::ReturnSendSlot(char* slot) {
  if (std::find(all_send_.begin(), all_send_.end(), slot) != all_send_.end()) {
    free_send_.push_back(slot);
  }
}

Result<char*> DeviceStaging::StageOut(const void* src, std::size_t len) {
  char* slot = TakeSendSlot();
  if (slot == nullptr) {
    return nullptr;
  }
  Status copied = Copy(slot, src, len);
  if (!copied.ok()) {
    ReturnSendSlot(slot);
    return copied;
  }
  return slot;
}

Status DeviceStaging::Copy(void* dst, const void* src, std::size_t len) {
  SLUICE_RETURN_IF_ERROR(backend_->CopyAsync(dst, src, len, stream_));
  SLUICE_RETURN_IF_ERROR(backend_->Record(event_, stream_));
  return backend_->Wait(event_, timeout_);
}

}  // namespace sluice::internal
