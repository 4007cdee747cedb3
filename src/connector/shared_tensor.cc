// Connector-allocated tensors (SharedTensor): memfd-backed memory that
// same-host peers map, so p2p consumers read it with one memcpy.
#include <limits>
#include <mutex>
#include <utility>

#include "connector/connector_impl.h"

namespace sluice {
namespace internal {

struct SharedTensorState {
  SharedBuffer buffer;
  std::shared_ptr<OwnerLink<ConnectorImpl>> link;

  ~SharedTensorState() {
    link->Call([this](ConnectorImpl& c) { c.Forget(buffer.data()); });
  }
};

Result<SharedTensor> ConnectorImpl::AllocateTensor(DType dtype,
                                                   const std::vector<std::int64_t>& shape) {
  if (shape.empty() || shape.size() > 8) {
    return InvalidArgumentError("AllocateTensor: rank must be 1..8, got " +
                                std::to_string(shape.size()));
  }
  std::uint64_t bytes = DTypeSize(dtype);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 1) {
      return InvalidArgumentError("AllocateTensor: dimension " + std::to_string(i) + " is " +
                                  std::to_string(shape[i]) + "; every dimension must be >= 1");
    }
    const auto d = static_cast<std::uint64_t>(shape[i]);
    if (bytes > std::numeric_limits<std::uint64_t>::max() / d) {
      return InvalidArgumentError("AllocateTensor: the tensor's size overflows 64 bits");
    }
    bytes *= d;
  }
  TensorView view{nullptr, dtype, shape, {}};
  auto state = std::make_shared<SharedTensorState>();
  state->link = link_;
  Result<SharedBuffer> buffer = engine_->AllocateShared(bytes);
  if (!buffer.ok()) {
    return buffer.status().WithContext("AllocateTensor " + view.ToString());
  }
  state->buffer = std::move(buffer).value();
  SLUICE_RETURN_IF_ERROR(regs_->Ensure(state->buffer.data(), bytes, Access::kRemoteRead).status());
  view.data = state->buffer.data();
  SharedTensor t;
  t.state_ = std::move(state);
  t.view_ = std::move(view);
  return t;
}

}  // namespace internal

SharedTensor::SharedTensor() = default;
SharedTensor::SharedTensor(SharedTensor&& o) noexcept
    : state_(std::move(o.state_)), view_(std::exchange(o.view_, TensorView{})) {}
SharedTensor& SharedTensor::operator=(SharedTensor&& o) noexcept {
  if (this != &o) {
    state_ = std::move(o.state_);
    view_ = std::exchange(o.view_, TensorView{});
  }
  return *this;
}
SharedTensor::~SharedTensor() = default;

Result<SharedTensor> DiffusionConnector::AllocateTensor(DType dtype,
                                                        const std::vector<std::int64_t>& shape) {
  return impl_->AllocateTensor(dtype, shape);
}

}  // namespace sluice
