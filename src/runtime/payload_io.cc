#include "runtime/payload_io.h"

#include "sluice/cache/condition.h"

namespace sluice::internal {

Result<StageOutput> PublishForNextStage(DiffusionConnector& conn, std::uint64_t job,
                                        const std::string& stage, PayloadKind kind,
                                        const TensorView& tensor, int chunk_dim, int num_chunks,
                                        std::chrono::milliseconds timeout, bool reused) {
  StagePayload p;
  p.request_id = "job-" + std::to_string(job) + "-" + stage;
  p.kind = kind;
  p.tensor = tensor;
  p.chunk_dim = chunk_dim;
  p.num_chunks = num_chunks;
  p.lease = Lease{Lease::Kind::kPinned, {}};
  SLUICE_ASSIGN_OR_RETURN(auto h, conn.Publish(p));
  Status s = h->Wait(timeout);
  if (s.ok() && h->descriptor().mode == TransferMode::kP2p) {
    s = h->WaitReleased(timeout);  // The consumer reads from this buffer.
  }
  if (!reused) {
    conn.Forget(tensor.data);
  }
  SLUICE_RETURN_IF_ERROR(s);
  StageOutput out;
  out.output = h->descriptor().Encode();
  out.payload_keys = h->descriptor().StoreKeys();
  return out;
}

Status ReadCachedInput(const std::string& input, StoreClient* store, std::size_t entry_bytes,
                       std::size_t entries,
                       const std::function<void(std::size_t, const std::vector<std::byte>&)>& use) {
  if (store == nullptr) {
    return FailedPreconditionError("input: a cached input needs a store client (--master)");
  }
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> keys, cache::DecodeCachedInput(input));
  if (entries > 0 && keys.size() != entries) {
    return InvalidArgumentError("input: the cached input must name " + std::to_string(entries) +
                                " entries, not " + std::to_string(keys.size()));
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    Result<std::vector<std::byte>> v = store->Get(keys[i]);
    if (!v.ok()) {
      // Gone, or on a node that cannot be read (lost, restarting): either
      // way the orchestrator runs the producer again, which computes the
      // entry anew once the store has let go of the old one.
      return NotFoundError("input: cached entry " + keys[i] +
                           " is unreadable: " + v.status().ToString());
    }
    if (v->size() != entry_bytes) {
      return InvalidArgumentError("input: cached entry " + keys[i] + " holds " +
                                  std::to_string(v->size()) + " bytes, not " +
                                  std::to_string(entry_bytes));
    }
    use(i, *v);
  }
  return Status::Ok();
}

Status FetchInto(DiffusionConnector& conn, const PayloadDescriptor& d, void* dst,
                 const ChunkFn& on_chunk) {
  Status s;
  {
    SLUICE_ASSIGN_OR_RETURN(auto stream, conn.Consume(d, TensorView{dst, d.dtype, d.shape, {}}));
    while (s.ok()) {
      Result<std::optional<ChunkView>> c = stream->Next();
      if (!c.ok()) {
        s = c.status();
      } else if (!c->has_value()) {
        break;
      } else if (on_chunk) {
        s = on_chunk(**c);
      }
    }
  }
  conn.Forget(dst);
  SLUICE_RETURN_IF_ERROR(s);
  return conn.Release(d);
}

}  // namespace sluice::internal
