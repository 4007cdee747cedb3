#include "sluice/connector/tensor.h"

#include <array>
#include <cstdint>

namespace sluice {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};
constexpr std::array<DTypeInfo, 10> kDTypes = {{{DType::kBool, "bool", 1},
                                                {DType::kU8, "u8", 1},
                                                {DType::kI8, "i8", 1},
                                                {DType::kI16, "i16", 2},
                                                {DType::kI32, "i32", 4},
                                                {DType::kI64, "i64", 8},
                                                {DType::kF16, "f16", 2},
                                                {DType::kBF16, "bf16", 2},
                                                {DType::kF32, "f32", 4},
                                                {DType::kF64, "f64", 8}}};

constexpr std::size_t kMaxRank = 8;
constexpr int kMaxDevice = 1023;

}  // namespace

std::string_view DTypeName(DType d) {
  return kDTypes[static_cast<std::size_t>(d)].name;
}

std::size_t DTypeSize(DType d) {
  return kDTypes[static_cast<std::size_t>(d)].size;
}

Result<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& i : kDTypes) {
    if (i.name == name) {
      return i.dtype;
    }
  }
  return InvalidArgumentError("unknown dtype '" + std::string(name) +
                              "' (expected bool, u8, i8, i16, i32, i64, f16, bf16, f32, f64)");
}

std::uint64_t NumElements(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  bool overflow = false;
  for (std::int64_t d : shape) {
    if (d <= 0) {
      return 0;
    }
    overflow = __builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n) || overflow;
  }
  return overflow ? UINT64_MAX : n;
}

std::vector<std::int64_t> RowMajorStrides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> s(shape.size());
  std::int64_t step = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = step;
    if (__builtin_mul_overflow(step, shape[i], &step)) {
      step = INT64_MAX;  // A shape this large fails validation anyway.
    }
  }
  return s;
}

std::uint64_t TensorView::numel() const {
  return NumElements(shape);
}

bool TensorView::contiguous() const {
  if (strides.empty()) {
    return true;
  }
  if (strides.size() != shape.size()) {
    return false;
  }
  std::int64_t expect = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expect) {
      return false;
    }
    expect *= shape[i];
  }
  return true;
}

Status TensorView::Validate(std::string_view what) const {
  if (shape.empty() || shape.size() > kMaxRank) {
    return InvalidArgumentError(std::string(what) + ": rank must be 1.." +
                                std::to_string(kMaxRank) + ", got " + std::to_string(shape.size()));
  }
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return InvalidArgumentError(std::string(what) + ": dimension " + std::to_string(i) +
                                  " is negative");
    }
  }
  if (!strides.empty() && strides.size() != shape.size()) {
    return InvalidArgumentError(std::string(what) + ": strides and shape differ in rank");
  }
  if (data == nullptr && numel() > 0) {
    return InvalidArgumentError(std::string(what) + ": null data pointer");
  }
  if (memory == MemoryKind::kHost ? device != -1 : (device < -1 || device > kMaxDevice)) {
    return InvalidArgumentError(std::string(what) + ": device " + std::to_string(device) +
                                (memory == MemoryKind::kHost
                                     ? " given for host memory (use -1)"
                                     : " outside -1.." + std::to_string(kMaxDevice)));
  }
  return Status::Ok();
}

std::string TensorView::ToString() const {
  std::string s(DTypeName(dtype));
  s += "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i ? "," : "") + std::to_string(shape[i]);
  }
  s += "]";
  if (memory == MemoryKind::kDevice) {
    s += device < 0 ? " on a device" : " on device " + std::to_string(device);
  }
  return s;
}

}  // namespace sluice
