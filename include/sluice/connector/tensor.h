// sluice/connector/tensor.h
//
// A tensor as the connector sees it: a data pointer with dtype, shape and
// strides, owned by the caller (numpy, torch, or plain memory), in host
// memory or on a device of the engine's backend (EngineConfig::device). The
// connector never copies a tensor's bytes outside engine transfers, and
// never touches device memory from the CPU.

#ifndef SLUICE_CONNECTOR_TENSOR_H_
#define SLUICE_CONNECTOR_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/memory.h"
#include "sluice/status.h"

namespace sluice {

enum class DType : std::uint8_t { kBool, kU8, kI8, kI16, kI32, kI64, kF16, kBF16, kF32, kF64 };

// "bool", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64".
std::string_view DTypeName(DType d);
std::size_t DTypeSize(DType d);
// Accepts the names above. Errors: kInvalidArgument naming the input.
Result<DType> ParseDType(std::string_view name);

// Elements of a tensor of `shape` (negative dimensions count as 0);
// UINT64_MAX when the product overflows.
std::uint64_t NumElements(const std::vector<std::int64_t>& shape);
// The row-major (contiguous) strides of `shape`, in elements (INT64_MAX
// where they overflow).
std::vector<std::int64_t> RowMajorStrides(const std::vector<std::int64_t>& shape);

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kU8;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // In elements; empty means row-major contiguous.
  // Where `data` points: host memory, or memory of the engine's device
  // backend on device `device` (-1: whichever device holds it).
  MemoryKind memory = MemoryKind::kHost;
  int device = -1;

  std::uint64_t numel() const;
  std::uint64_t nbytes() const { return numel() * DTypeSize(dtype); }
  // True when the strides (if any) are exactly the row-major ones.
  bool contiguous() const;
  // Checks rank (1..8), non-negative dims, a non-null pointer for a
  // non-empty tensor, and the device (-1 for host memory, -1..1023 for
  // device memory); `what` names the tensor in the error.
  Status Validate(std::string_view what) const;
  // "bf16[1,16,21,90,160]", and " on device 0" (" on a device" for -1) for
  // device memory.
  std::string ToString() const;
};

}  // namespace sluice

#endif  // SLUICE_CONNECTOR_TENSOR_H_
