#include "connector/chunk_layout.h"

#include <string>

namespace sluice::internal {

Result<ChunkLayout> ChunkLayout::Make(std::vector<std::int64_t> shape, std::size_t elem_size,
                                      int chunk_dim, int num_chunks) {
  const int rank = static_cast<int>(shape.size());
  if (chunk_dim < -1 || chunk_dim >= rank) {
    return InvalidArgumentError("chunk_dim " + std::to_string(chunk_dim) +
                                " outside the tensor's rank " + std::to_string(rank));
  }
  if (chunk_dim == -1 && num_chunks != 1) {
    return InvalidArgumentError("num_chunks > 1 needs a chunk_dim");
  }
  ChunkLayout l;
  l.shape_ = std::move(shape);
  l.dim_ = chunk_dim;
  l.num_chunks_ = num_chunks;
  std::uint64_t total = elem_size;
  for (std::int64_t d : l.shape_) {
    total *= static_cast<std::uint64_t>(d);
  }
  l.total_ = total;
  if (chunk_dim == -1) {
    l.outer_ = 1;
    l.dim_len_ = 1;
    l.inner_ = total;
    return l;
  }
  l.dim_len_ = l.shape_[static_cast<std::size_t>(chunk_dim)];
  if (num_chunks < 1 || num_chunks > l.dim_len_) {
    return InvalidArgumentError("num_chunks " + std::to_string(num_chunks) + " must be in 1.." +
                                std::to_string(l.dim_len_) + " (shape[" +
                                std::to_string(chunk_dim) + "])");
  }
  for (int i = 0; i < chunk_dim; ++i) {
    l.outer_ *= static_cast<std::uint64_t>(l.shape_[static_cast<std::size_t>(i)]);
  }
  l.inner_ = elem_size;
  for (int i = chunk_dim + 1; i < rank; ++i) {
    l.inner_ *= static_cast<std::uint64_t>(l.shape_[static_cast<std::size_t>(i)]);
  }
  return l;
}

std::int64_t ChunkLayout::start(int i) const {
  const std::int64_t base = dim_len_ / num_chunks_;
  const std::int64_t extra = dim_len_ % num_chunks_;  // The first `extra` chunks get one more.
  return i * base + std::min<std::int64_t>(i, extra);
}

std::int64_t ChunkLayout::length(int i) const {
  return start(i + 1) - start(i);
}

std::uint64_t ChunkLayout::chunk_bytes(int i) const {
  return outer_ * static_cast<std::uint64_t>(length(i)) * inner_;
}

std::vector<ByteRun> ChunkLayout::Runs(int i) const {
  const std::uint64_t run = static_cast<std::uint64_t>(length(i)) * inner_;
  if (run == 0) {
    return {};
  }
  const std::uint64_t stride = static_cast<std::uint64_t>(dim_len_) * inner_;
  const std::uint64_t first = static_cast<std::uint64_t>(start(i)) * inner_;
  if (run == stride) {
    return {ByteRun{first, run * outer_}};  // Whole rows: one run.
  }
  std::vector<ByteRun> runs;
  runs.reserve(outer_);
  for (std::uint64_t o = 0; o < outer_; ++o) {
    runs.push_back(ByteRun{o * stride + first, run});
  }
  return runs;
}

}  // namespace sluice::internal
