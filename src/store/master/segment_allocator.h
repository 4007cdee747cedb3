// Space inside one store-node segment. Best fit over free extents kept in
// two ordered indexes (by size for allocation, by offset for coalescing on
// free), so both operations are O(log n) in the number of free extents.
// Not thread-safe: the master serializes access.
#ifndef SLUICE_STORE_MASTER_SEGMENT_ALLOCATOR_H_
#define SLUICE_STORE_MASTER_SEGMENT_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "sluice/status.h"

namespace sluice::internal {

struct AllocatorStats {
  std::uint64_t capacity = 0;
  std::uint64_t used = 0;
  std::uint64_t free_extents = 0;
  std::uint64_t largest_free = 0;
  // 1 - largest_free / free bytes: 0 when all free space is one extent.
  double fragmentation = 0;
};

class SegmentAllocator {
 public:
  static constexpr std::uint64_t kAlign = 64;  // One cache line.
  // Allocations of at least kPageAlignFrom bytes start on a kPage boundary:
  // page-aligned copies run faster, and DMA engines (RDMA, GPU) want pages.
  static constexpr std::uint64_t kPage = 4096;
  static constexpr std::uint64_t kPageAlignFrom = 64 * 1024;

  explicit SegmentAllocator(std::uint64_t capacity);

  // Returns the offset of `len` bytes (rounded up to kAlign; page-aligned
  // from kPageAlignFrom bytes, the space skipped to align stays free).
  // Errors: kInvalidArgument (0 bytes); kResourceExhausted (no extent fits).
  Result<std::uint64_t> Allocate(std::uint64_t len);
  // Claims exactly [offset, offset+len) (rounded up to kAlign), for rebuilding
  // the table after a master restart. Errors: kInvalidArgument (misaligned),
  // kAlreadyExists (any byte of the range is not free).
  Status AllocateAt(std::uint64_t offset, std::uint64_t len);
  // Frees what Allocate(len) returned at `offset`. REQUIRES: it is allocated.
  void Free(std::uint64_t offset, std::uint64_t len);

  AllocatorStats Stats() const;
  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t used() const { return used_; }

  static std::uint64_t Rounded(std::uint64_t len) { return (len + kAlign - 1) / kAlign * kAlign; }

 private:
  void Insert(std::uint64_t offset, std::uint64_t len);
  void Erase(std::uint64_t offset, std::uint64_t len);

  std::uint64_t capacity_;
  std::uint64_t used_ = 0;
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;  // (len, offset)
  std::map<std::uint64_t, std::uint64_t> by_offset_;           // offset -> len
};

}  // namespace sluice::internal

#endif  // SLUICE_STORE_MASTER_SEGMENT_ALLOCATOR_H_
