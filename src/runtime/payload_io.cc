#include "runtime/payload_io.h"

namespace sluice::internal {

Result<StageOutput> PublishForNextStage(DiffusionConnector& conn, std::uint64_t job,
                                        const std::string& stage, PayloadKind kind,
                                        const TensorView& tensor, int chunk_dim, int num_chunks,
                                        std::chrono::milliseconds timeout) {
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
  conn.Forget(tensor.data);
  SLUICE_RETURN_IF_ERROR(s);
  StageOutput out;
  out.output = h->descriptor().Encode();
  out.payload_keys = h->descriptor().StoreKeys();
  return out;
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
