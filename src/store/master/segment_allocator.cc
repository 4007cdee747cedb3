#include "store/master/segment_allocator.h"

namespace sluice::internal {

SegmentAllocator::SegmentAllocator(std::uint64_t capacity) : capacity_(capacity / kAlign * kAlign) {
  if (capacity_ > 0) {
    Insert(0, capacity_);
  }
}

void SegmentAllocator::Insert(std::uint64_t offset, std::uint64_t len) {
  by_size_.emplace(len, offset);
  by_offset_.emplace(offset, len);
}

void SegmentAllocator::Erase(std::uint64_t offset, std::uint64_t len) {
  by_size_.erase({len, offset});
  by_offset_.erase(offset);
}

Result<std::uint64_t> SegmentAllocator::Allocate(std::uint64_t len) {
  if (len == 0) {
    return InvalidArgumentError("allocation of 0 bytes");
  }
  const std::uint64_t need = Rounded(len);
  const std::uint64_t align = need >= kPageAlignFrom ? kPage : kAlign;
  auto pad_of = [align](std::uint64_t offset) { return (align - offset % align) % align; };
  // Best fit: the smallest extent that holds `need` after aligning. Extents
  // shorter than need + align - 1 may not; look at a few of them, then take
  // the smallest that surely fits, so the search stays O(log n).
  auto it = by_size_.lower_bound({need, 0});
  for (int tries = 0; it != by_size_.end() && tries < 8; ++it, ++tries) {
    if (it->first >= need + pad_of(it->second)) {
      break;
    }
  }
  if (it != by_size_.end() && it->first < need + pad_of(it->second)) {
    it = by_size_.lower_bound({need + align - 1, 0});
  }
  if (it == by_size_.end()) {
    return ResourceExhaustedError("no free extent of " + std::to_string(need) + " bytes");
  }
  const auto [extent_len, start] = *it;
  const std::uint64_t pad = pad_of(start);
  Erase(start, extent_len);
  if (pad > 0) {
    Insert(start, pad);
  }
  if (extent_len > pad + need) {
    Insert(start + pad + need, extent_len - pad - need);
  }
  used_ += need;
  return start + pad;
}

Status SegmentAllocator::AllocateAt(std::uint64_t offset, std::uint64_t len) {
  if (len == 0 || offset % kAlign != 0) {
    return InvalidArgumentError("AllocateAt: zero length or misaligned offset");
  }
  const std::uint64_t need = Rounded(len);
  auto it = by_offset_.upper_bound(offset);
  if (it == by_offset_.begin()) {
    return AlreadyExistsError("AllocateAt: range is not free");
  }
  --it;
  const auto [start, extent_len] = *it;
  if (offset + need > start + extent_len) {
    return AlreadyExistsError("AllocateAt: range is not free");
  }
  Erase(start, extent_len);
  if (offset > start) {
    Insert(start, offset - start);
  }
  if (start + extent_len > offset + need) {
    Insert(offset + need, start + extent_len - offset - need);
  }
  used_ += need;
  return Status::Ok();
}

void SegmentAllocator::Free(std::uint64_t offset, std::uint64_t len) {
  std::uint64_t start = offset;
  std::uint64_t size = Rounded(len);
  used_ -= size;
  auto next = by_offset_.lower_bound(start);
  if (next != by_offset_.end() && start + size == next->first) {
    size += next->second;
    Erase(next->first, next->second);
  }
  auto prev = by_offset_.lower_bound(start);
  if (prev != by_offset_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      Erase(prev->first, prev->second);
    }
  }
  Insert(start, size);
}

AllocatorStats SegmentAllocator::Stats() const {
  AllocatorStats s;
  s.capacity = capacity_;
  s.used = used_;
  s.free_extents = by_size_.size();
  s.largest_free = by_size_.empty() ? 0 : by_size_.rbegin()->first;
  const std::uint64_t free_bytes = capacity_ - used_;
  s.fragmentation =
      free_bytes == 0 ? 0
                      : 1.0 - static_cast<double>(s.largest_free) / static_cast<double>(free_bytes);
  return s;
}

}  // namespace sluice::internal
