// How stage handlers hand tensors to the next stage through the connector:
// publish an output and return once the next stage can read it without the
// producer's buffer; fetch an input chunk by chunk, then release it.
#ifndef SLUICE_RUNTIME_PAYLOAD_IO_H_
#define SLUICE_RUNTIME_PAYLOAD_IO_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sluice/connector/connector.h"
#include "sluice/runtime/stage_worker.h"
#include "sluice/store/client.h"

namespace sluice::internal {

// Publishes `tensor` as request "job-<job>-<stage>" with a pinned lease (the
// orchestrator removes it once the next stage is done), in `num_chunks`
// chunks along `chunk_dim` (-1: whole), and returns the stage output
// (descriptor and store keys) once the buffer may be freed: the payload is
// in the store (store mode), or its consumer released it (p2p).
// With `reused`, tensor.data is a buffer the caller publishes from again:
// the connector keeps its registration (the caller calls Forget before
// freeing it); otherwise it is forgotten here. Errors: the connector's;
// kDeadlineExceeded after `timeout`.
Result<StageOutput> PublishForNextStage(DiffusionConnector& conn, std::uint64_t job,
                                        const std::string& stage, PayloadKind kind,
                                        const TensorView& tensor, int chunk_dim = -1,
                                        int num_chunks = 1,
                                        std::chrono::milliseconds timeout = std::chrono::minutes(5),
                                        bool reused = false);

// Reads every cache entry the cached input `input` names (cache/condition.h)
// through `store`, in order, handing entry i's bytes to `use(i, bytes)`.
// Each must hold `entry_bytes`; `entries` > 0 also fixes their count.
// Errors: kFailedPrecondition (no store client); kInvalidArgument (not a
// cached input, another count or size); kNotFound naming an entry that
// cannot be read (gone, or on a node that cannot be reached): the
// orchestrator then runs the producer again.
Status ReadCachedInput(const std::string& input, StoreClient* store, std::size_t entry_bytes,
                       std::size_t entries,
                       const std::function<void(std::size_t, const std::vector<std::byte>&)>& use);

// Called for each chunk as it lands in dst, in order. A non-OK status stops
// the fetch and is returned.
using ChunkFn = std::function<Status(const ChunkView&)>;

// Fetches the payload `d` into `dst` (contiguous, of d's shape and dtype;
// must stay allocated until the call returns), calling `on_chunk` as each
// chunk lands, then releases the payload. Errors: the connector's, or
// on_chunk's.
Status FetchInto(DiffusionConnector& conn, const PayloadDescriptor& d, void* dst,
                 const ChunkFn& on_chunk = nullptr);

// Decodes the descriptor `input` and fetches its payload into a new vector.
// Errors: kInvalidArgument (bad descriptor, or T's size is not the dtype's);
// FetchInto's.
template <typename T>
Result<std::vector<T>> FetchInput(DiffusionConnector& conn, const std::string& input,
                                  PayloadDescriptor* descriptor = nullptr,
                                  const ChunkFn& on_chunk = nullptr) {
  SLUICE_ASSIGN_OR_RETURN(PayloadDescriptor d, PayloadDescriptor::Decode(input));
  if (DTypeSize(d.dtype) != sizeof(T)) {
    return InvalidArgumentError("input: payload dtype " + std::string(DTypeName(d.dtype)) +
                                " does not match the stage's element size " +
                                std::to_string(sizeof(T)));
  }
  std::vector<T> out(NumElements(d.shape));
  SLUICE_RETURN_IF_ERROR(FetchInto(conn, d, out.data(), on_chunk));
  if (descriptor != nullptr) {
    *descriptor = std::move(d);
  }
  return out;
}

}  // namespace sluice::internal

#endif  // SLUICE_RUNTIME_PAYLOAD_IO_H_
