// Public face of the transfer engine: forwards to EngineImpl.
#include "sluice/transfer/engine.h"

#include "transfer/engine_impl.h"

namespace sluice {

std::string_view AccessName(Access a) {
  switch (a) {
    case Access::kLocalOnly:
      return "local";
    case Access::kRemoteRead:
      return "read";
    case Access::kRemoteWrite:
      return "write";
    case Access::kRemoteReadWrite:
      return "rw";
  }
  return "unknown";
}

SharedBuffer::SharedBuffer(std::shared_ptr<internal::SharedAllocation> alloc)
    : alloc_(std::move(alloc)) {}
SharedBuffer::~SharedBuffer() = default;
void* SharedBuffer::data() const {
  return alloc_ ? alloc_->addr : nullptr;
}
std::size_t SharedBuffer::size() const {
  return alloc_ ? alloc_->size : 0;
}

TransferEngine::TransferEngine(std::unique_ptr<internal::EngineImpl> impl)
    : impl_(std::move(impl)) {}
TransferEngine::~TransferEngine() = default;

Result<std::unique_ptr<TransferEngine>> TransferEngine::Create(const EngineConfig& config) {
  SLUICE_ASSIGN_OR_RETURN(auto impl, internal::EngineImpl::Create(config));
  return std::unique_ptr<TransferEngine>(new TransferEngine(std::move(impl)));
}

const std::string& TransferEngine::endpoint() const {
  return impl_->endpoint();
}

Result<RegionKey> TransferEngine::RegisterMemory(void* addr, std::size_t len, MemoryKind kind,
                                                 Access access, int device) {
  return impl_->RegisterMemory(addr, len, kind, access, device);
}

Status TransferEngine::UnregisterMemory(RegionKey key) {
  return impl_->UnregisterMemory(key);
}

Result<SharedBuffer> TransferEngine::AllocateShared(std::size_t len) {
  return impl_->AllocateShared(len);
}

Result<SegmentId> TransferEngine::OpenSegment(std::string_view endpoint) {
  return impl_->OpenSegment(endpoint);
}

Result<std::vector<RegionInfo>> TransferEngine::SegmentRegions(SegmentId segment) const {
  return impl_->SegmentRegions(segment);
}

Result<PeerMemory> TransferEngine::MapPeerMemory(SegmentId segment, RegionKey key,
                                                 std::uint64_t offset, std::uint64_t length) {
  return impl_->MapPeerMemory(segment, key, offset, length);
}

Result<std::shared_ptr<TransferBatch>> TransferEngine::Submit(std::span<const TransferRequest> ops,
                                                              BatchCallback callback) {
  return impl_->Submit(ops, std::move(callback));
}

Status TransferEngine::TransferSync(std::span<const TransferRequest> ops,
                                    std::chrono::milliseconds timeout) {
  SLUICE_ASSIGN_OR_RETURN(auto batch, impl_->Submit(ops, nullptr));
  return batch->Wait(timeout);
}

Status TransferEngine::Notify(SegmentId segment, std::span<const std::byte> data) {
  return impl_->Notify(segment, data);
}

void TransferEngine::SetNotifyHandler(NotifyHandler handler) {
  impl_->SetNotifyHandler(std::move(handler));
}

std::vector<TransportStats> TransferEngine::TransportCounters() const {
  return impl_->TransportCounters();
}

}  // namespace sluice
