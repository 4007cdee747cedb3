// sluice/connector/connector.h
//
// DiffusionConnector: how stage code hands tensors to the next stage. A
// producer Publish()es a payload and passes the returned descriptor on (in
// a queue message); a consumer Consume()s it into its own tensor, chunk by
// chunk as chunks land, and Release()s it. The connector hides the transfer
// engine and the store; it copies nothing outside engine transfers.
//
// Modes:
//   p2p    the consumer reads straight from the producer's buffer, which
//          the producer must keep until the consumer releases it;
//   store  the producer puts the payload into the store and may reuse its
//          buffer as soon as the handle completes; any consumer, any time;
//   auto   p2p when the publish names a bound consumer (the orchestrator
//          knows it at schedule time) and the producer keeps its buffer
//          (`keep_buffer`); store otherwise. Without a store, p2p.
//
// Chunking: `chunk_dim`/`num_chunks` cut the tensor along any dimension.
// Chunk i moves as one batch of contiguous runs (one op per run). A
// progressive producer marks chunks ready as they exist; readiness reaches
// consumers by engine notifies (p2p) or per-chunk store keys (store).
//
// Thread safety: every method may be called from any thread.

#ifndef SLUICE_CONNECTOR_CONNECTOR_H_
#define SLUICE_CONNECTOR_CONNECTOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sluice/connector/descriptor.h"
#include "sluice/connector/tensor.h"
#include "sluice/security.h"
#include "sluice/status.h"
#include "sluice/store/client.h"
#include "sluice/transfer/engine.h"

namespace sluice {

namespace internal {
class ConnectorImpl;
class HandleState;
class StreamState;
struct SharedTensorState;
}  // namespace internal

struct ConnectorConfig {
  std::string role = "denoise";  // encode | denoise | decode | any [a-z0-9_-]{1,32}.
  TransferMode mode = TransferMode::kAuto;
  EngineConfig engine;
  // The store master ("host:port"); empty: no store (store mode fails,
  // auto always picks p2p).
  StoreClientConfig store;
  // Background threads moving store-mode payloads. 1..256.
  int store_threads = 4;
  // Consumers give up waiting for a chunk after this long.
  std::chrono::milliseconds consume_timeout{60000};

  // The cluster credential and TLS (sluice/security.h). Create applies it
  // to `engine` (its transfer secret) and `store` unless they set their own.
  SecurityConfig security;

  // Fills unset fields from SLUICE_MASTER (store master), SLUICE_LISTEN
  // (engine endpoint), SLUICE_TRANSFER_MODE, SLUICE_TRANSPORTS
  // ("tcp,shm"), and an open `security` from SLUICE_CLUSTER_TOKEN_FILE and
  // SLUICE_TLS_{CERT,KEY,CA}_FILE. Errors: kInvalidArgument naming the
  // variable.
  Status ApplyEnvironment();
};

struct StagePayload {
  std::string request_id;  // 1..256 bytes.
  PayloadKind kind = PayloadKind::kLatent;
  // Must be contiguous and stay allocated and unmodified until the handle
  // completes (store) or is released (p2p).
  TensorView tensor;
  int chunk_dim = -1;  // -1: whole tensor.
  int num_chunks = 1;
  Lease lease;
  // Chunks are marked ready one by one with StageHandle::MarkReady; else
  // the whole tensor is ready at Publish.
  bool progressive = false;
  // auto mode: the consumer's engine endpoint when known at publish time.
  std::string bound_consumer;
  // auto mode: the producer keeps the buffer until release (p2p allowed).
  bool keep_buffer = true;
};

// The producer's view of one published payload.
class StageHandle {
 public:
  ~StageHandle();
  // Small enough for a queue message; see descriptor.h.
  const PayloadDescriptor& descriptor() const;
  // Progressive producers: chunk `i` now holds its final bytes. Idempotent.
  // Errors: kInvalidArgument (index out of range); kFailedPrecondition
  // (not progressive, or the payload failed or was released).
  Status MarkReady(int i);
  // Waits until every chunk is published (store: in the store, the buffer
  // may be reused; p2p: ready for consumers). Returns the publish outcome;
  // kDeadlineExceeded if still running after `timeout`.
  Status Wait(std::chrono::milliseconds timeout);
  // p2p: true once the consumer released the payload (the buffer is free).
  // store: true once the payload is complete in the store.
  bool released() const;
  Status WaitReleased(std::chrono::milliseconds timeout);
  // Run once, on a connector thread (at once if already so). Must not block.
  void OnComplete(std::function<void(const Status&)> cb);
  void OnReleased(std::function<void()> cb);

 private:
  friend class internal::ConnectorImpl;
  explicit StageHandle(std::shared_ptr<internal::HandleState> s);
  std::shared_ptr<internal::HandleState> state_;
};

// One landed chunk: a view into the consumer's dst.
struct ChunkView {
  int index = 0;
  std::int64_t start = 0;   // Along the chunk dimension.
  std::int64_t length = 0;  // Indices along the chunk dimension.
  TensorView view;          // Shares dst's memory.
};

// Chunks of one Consume(), in order, each as soon as its bytes landed.
class ChunkStream {
 public:
  ~ChunkStream();  // Stops fetching; chunks in flight finish first.
  // The next chunk, or nullopt after the last. Errors: kUnavailable (scope
  // kEndpoint: the producer or a store node died), kNotFound (released or
  // never published), kDeadlineExceeded (nothing within consume_timeout).
  Result<std::optional<ChunkView>> Next();

 private:
  friend class internal::ConnectorImpl;
  explicit ChunkStream(std::shared_ptr<internal::StreamState> s);
  std::shared_ptr<internal::StreamState> state_;
};

// A tensor whose memory the connector allocated (DiffusionConnector::
// AllocateTensor): memfd-backed, pre-faulted, registered. A p2p consumer on
// the same host maps it and reads it with one memcpy instead of
// process_vm_readv, which moves bytes ~3x slower (README, "Connector
// tensors"). Store mode gains nothing from it. Move-only; the memory lives
// until the SharedTensor is destroyed or moved from, and may outlive its
// connector. Destroying it while a consumer still reads it is safe for the
// consumer's process (its mapping keeps the pages), but what it reads is
// then unspecified: keep it until the payload is released, as for any
// published tensor.
class SharedTensor {
 public:
  SharedTensor();
  SharedTensor(SharedTensor&&) noexcept;
  SharedTensor& operator=(SharedTensor&&) noexcept;
  ~SharedTensor();  // Drops the connector's registration of it, then the memory.

  // Contiguous, row-major; all bytes zero at allocation. Empty when moved from.
  const TensorView& view() const { return view_; }
  void* data() const { return view_.data; }
  std::uint64_t nbytes() const { return view_.nbytes(); }

 private:
  friend class internal::ConnectorImpl;
  std::shared_ptr<internal::SharedTensorState> state_;
  TensorView view_;
};

// A payload read in place (DiffusionConnector::ConsumeInPlace): the
// producer's tensor (p2p) or the store node's memory (store), mapped into
// this process. Read it, never write it. `keep` holds the mapping:
// `view.data` stays mapped while any copy of it lives, whatever the peer
// does. p2p: the bytes are the payload's until Release, after which the
// producer may reuse its buffer. store: `keep` also holds a read lease,
// which ends (a completed read: delete-on-consume counts it) when the last
// copy is dropped; drop it within the master's read lease timeout (60 s by
// default), past which the store may reclaim the object.
struct PayloadView {
  TensorView view;
  std::shared_ptr<const void> keep;
};

class DiffusionConnector {
 public:
  // Starts an engine (and a store client when `store.master` is set).
  // Errors: kInvalidArgument naming the bad field; engine/store errors.
  static Result<std::unique_ptr<DiffusionConnector>> Create(ConnectorConfig config);
  // Fails pending streams, stops background work, unregisters memory.
  ~DiffusionConnector();

  // Starts publishing and returns at once; every request moves on its own,
  // so a slow one never holds back another. Registers the tensor's memory
  // (cached). The tensor may be device memory (TensorView::memory) when the
  // engine has a device backend (config.engine.device). Errors:
  // kInvalidArgument (bad payload: the message names the field);
  // kFailedPrecondition (store mode without a store); kUnimplemented (a
  // device tensor without a device backend, naming engine.device).
  Result<std::unique_ptr<StageHandle>> Publish(const StagePayload& payload);

  // Fetches the payload into `dst` (contiguous, same dtype and shape as
  // the descriptor; registered on first use, cached), host or device
  // memory whatever the producer's was; chunk views carry dst's kind.
  // `dst` must outlive the stream. Errors up front, before any transfer: kInvalidArgument
  // (shape or dtype mismatch, not contiguous); kFailedPrecondition (store
  // payload without a store).
  Result<std::unique_ptr<ChunkStream>> Consume(const PayloadDescriptor& d, const TensorView& dst);

  // Reads a payload without copying it and returns a view (PayloadView).
  // p2p: a complete payload published from a connector tensor
  // (AllocateTensor) by a producer on this host. store: a payload in one
  // store object in the tensor's layout (whole, or complete at publish and
  // chunked along a dimension with only size-1 dimensions before it) held
  // by a node on this host; waits up to consume_timeout for the commit.
  // Release() it when done, as after Consume. Thread-safe. Errors:
  // kFailedPrecondition naming why the payload cannot be read in place
  // (progressive p2p, chunks in separate objects or across an inner
  // dimension, another host, ordinary memory, the producer's device
  // memory): Consume it instead;
  // kUnavailable (scope kEndpoint: the producer or node is gone);
  // kNotFound (the tensor or object is gone); kDeadlineExceeded.
  Result<PayloadView> ConsumeInPlace(const PayloadDescriptor& d);

  // Ends the consumer's lease: store mode removes delete-on-consume chunks
  // still present; p2p tells the producer its buffer is free. Idempotent.
  Status Release(const PayloadDescriptor& d);

  // Drops the cached registration of memory at `data` (call before freeing
  // memory that was published or consumed into). Idempotent.
  void Forget(const void* data);

  // Allocates a zeroed, contiguous tensor of `dtype` and `shape` in memory
  // same-host peers can map (see SharedTensor), registered for publishing
  // and consuming. Use it for buffers a stage publishes p2p. Errors:
  // kInvalidArgument (rank not 1..8, a dimension < 1, or the size overflows);
  // kResourceExhausted (more than the host's available memory, or the
  // kernel refused it). Thread-safe.
  Result<SharedTensor> AllocateTensor(DType dtype, const std::vector<std::int64_t>& shape);

  // Opens the store connections a first Publish or Consume would open
  // (see StoreClient::Warm): a worker calls it before it registers, so its
  // first job does not pay for them. Without a store (p2p only) there is
  // nothing to open: OK. Errors: StoreClient::Warm's; the connector stays
  // usable. Thread-safe, idempotent.
  Status Warm();

  TransferEngine& engine();
  const ConnectorConfig& config() const;
  // Payload bytes this connector copied outside engine transfers (the store
  // client's staging copies included). Publish and Consume never copy, so
  // this stays 0; benchmarks report it as the proof.
  std::uint64_t bytes_copied_outside_transfers() const;
  // Payloads through this connector so far (what a worker's /metrics
  // shows as its stage's payloads in and out). Thread-safe.
  struct Counters {
    // Publish calls that succeeded, and their tensors' bytes.
    std::uint64_t published = 0, published_bytes = 0;
    // Consume and ConsumeInPlace calls that succeeded (a Consume counts
    // when its fetch starts), and their payloads' bytes (descriptor nbytes).
    std::uint64_t consumed = 0, consumed_bytes = 0;
  };
  Counters counters() const;

 private:
  explicit DiffusionConnector(std::unique_ptr<internal::ConnectorImpl> impl);
  std::unique_ptr<internal::ConnectorImpl> impl_;
  std::atomic<std::uint64_t> published_{0}, published_bytes_{0};
  std::atomic<std::uint64_t> consumed_{0}, consumed_bytes_{0};
};

}  // namespace sluice

#endif  // SLUICE_CONNECTOR_CONNECTOR_H_
