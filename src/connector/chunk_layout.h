// Where each chunk of a row-major tensor lies: chunk i along dimension d is
// the slice [start, start+len) of d, which is prod(shape[:d]) equal runs of
// len * prod(shape[d+1:]) elements, one run per outer index. A chunk moves as
// one batch with one op per run; nothing is packed. In the store, chunk i is
// one object holding its runs back to back.
#ifndef SLUICE_CONNECTOR_CHUNK_LAYOUT_H_
#define SLUICE_CONNECTOR_CHUNK_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "sluice/status.h"

namespace sluice::internal {

struct ByteRun {
  std::uint64_t offset = 0;  // From the tensor's first byte.
  std::uint64_t length = 0;
};

class ChunkLayout {
 public:
  // `chunk_dim` -1 means one chunk. Chunks differ in length by at most one
  // index (21 split 8 ways: 3,3,3,3,3,2,2,2).
  // Errors: kInvalidArgument (dim out of range, num_chunks outside
  // 1..shape[dim], or not 1 without a dim).
  static Result<ChunkLayout> Make(std::vector<std::int64_t> shape, std::size_t elem_size,
                                  int chunk_dim, int num_chunks);

  int num_chunks() const { return num_chunks_; }
  std::uint64_t total_bytes() const { return total_; }
  // Index range of chunk i along the chunk dimension.
  std::int64_t start(int i) const;
  std::int64_t length(int i) const;
  // Number of runs per chunk and each run's length (equal within a chunk).
  std::uint64_t runs_per_chunk() const { return outer_; }
  std::uint64_t chunk_bytes(int i) const;
  // The runs of chunk i, in order; adjacent runs are merged.
  std::vector<ByteRun> Runs(int i) const;

 private:
  std::vector<std::int64_t> shape_;
  int dim_ = -1;
  int num_chunks_ = 1;
  std::uint64_t outer_ = 1;   // prod(shape[:dim]).
  std::uint64_t inner_ = 1;   // Bytes of one index of `dim`: prod(shape[dim+1:]) * elem.
  std::int64_t dim_len_ = 1;  // shape[dim].
  std::uint64_t total_ = 0;
};

}  // namespace sluice::internal

#endif  // SLUICE_CONNECTOR_CHUNK_LAYOUT_H_
