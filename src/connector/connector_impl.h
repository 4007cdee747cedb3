// Internals of DiffusionConnector: per-payload producer state, per-consume
// stream state, the channel interface its two modes implement (p2p.h,
// store_mode.h), and the connector itself.
#ifndef SLUICE_CONNECTOR_CONNECTOR_IMPL_H_
#define SLUICE_CONNECTOR_CONNECTOR_IMPL_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sluice/connector/connector.h"

#include "common/elastic_pool.h"
#include "common/mutex.h"
#include "common/owner_link.h"
#include "connector/chunk_layout.h"
#include "connector/registrations.h"

namespace sluice::internal {

// One published payload, shared by its StageHandle and the connector.
class HandleState {
 public:
  Mutex mu;
  CondVar cv;
  PayloadDescriptor desc;
  ChunkLayout layout;
  char* base = nullptr;  // The producer's tensor.
  bool progressive = false;
  std::vector<bool> ready SLUICE_GUARDED_BY(mu);
  int published SLUICE_GUARDED_BY(mu) = 0;         // Chunks ready (p2p) or stored (store).
  std::vector<bool> queued SLUICE_GUARDED_BY(mu);  // store: handed to the drain task.
  bool draining SLUICE_GUARDED_BY(mu) = false;  // store: a task is putting this payload's chunks.
  Status failure SLUICE_GUARDED_BY(mu);
  bool complete SLUICE_GUARDED_BY(mu) = false;
  bool released SLUICE_GUARDED_BY(mu) = false;
  std::vector<std::pair<SegmentId, std::uint64_t>> subscribers
      SLUICE_GUARDED_BY(mu);  // p2p (segment, stream id).
  std::vector<std::function<void(const Status&)>> on_complete SLUICE_GUARDED_BY(mu);
  std::vector<std::function<void()>> on_released SLUICE_GUARDED_BY(mu);
  std::function<Status(int)> publish_chunk;  // Set by the connector per mode.

  // Marks completion/release under the lock; returns callbacks to run.
  std::vector<std::function<void()>> CompleteLocked(Status s) SLUICE_REQUIRES(mu);
  std::vector<std::function<void()>> ReleaseLocked() SLUICE_REQUIRES(mu);
};

// One Consume(): which chunks have landed in dst.
class StreamState {
 public:
  enum class Chunk : std::uint8_t { kWaiting, kFetching, kLanded };
  Mutex mu;
  CondVar cv;
  PayloadDescriptor desc;
  ChunkLayout layout;
  TensorView dst;
  std::vector<Chunk> chunks SLUICE_GUARDED_BY(mu);
  int next SLUICE_GUARDED_BY(mu) = 0;  // Next chunk Next() yields.
  Status error SLUICE_GUARDED_BY(mu);  // first failure ends the stream.
  bool stopping SLUICE_GUARDED_BY(mu) = false;
  std::chrono::milliseconds timeout{60000};
  // p2p
  SegmentId producer;
  std::uint64_t stream_id = 0;
  std::function<Status()> ping;             // Re-sends the subscription (liveness probe).
  int in_flight SLUICE_GUARDED_BY(mu) = 0;  // Batches writing into dst.
  // store
  bool fetching SLUICE_GUARDED_BY(mu) = false;  // A fetch task reads into dst.
  std::function<void()> on_destroy;

  void Fail(const Status& s);
};

inline void RunAll(std::vector<std::function<void()>>& fns) {
  for (auto& f : fns) {
    f();
  }
}

// kFailedPrecondition: `d` cannot be read in place, because `why` (p2p.cc).
Status RefuseInPlace(const PayloadDescriptor& d, std::string_view why);

// How payloads of one transfer mode move. The connector validates each
// call, builds the handle and stream states and hands them to the channel
// of the payload's mode (p2p.h, store_mode.h). Each channel has its own
// lock and threads, so a stalled peer of one never holds back the other;
// within a channel, nothing that may block on a peer (opening a segment,
// a store call) runs on a thread that serves other payloads. Thread-safe.
class Channel {
 public:
  virtual ~Channel() = default;
  // Fills the mode's fields of `h->desc` and sets `h->publish_chunk`, which
  // stays safe to call after the channel is gone (it then fails).
  virtual Status Publish(const std::shared_ptr<HandleState>& h, const StagePayload& p) = 0;
  // Starts moving the payload into `s->dst` and sets `s->on_destroy` (and,
  // p2p, `s->ping`), both safe to call after the channel is gone.
  virtual Status Consume(const std::shared_ptr<StreamState>& s) = 0;
  virtual Result<PayloadView> ConsumeInPlace(const PayloadDescriptor& d) = 0;
  virtual Status Release(const PayloadDescriptor& d) = 0;
  // Fails every open stream and unfinished handle with kCancelled, joins
  // the channel's threads, and detaches what may outlive it (handles,
  // streams). The connector calls it before its engine and store client go.
  // Idempotent.
  virtual void Shutdown() = 0;
};

class ConnectorImpl {
 public:
  explicit ConnectorImpl(ConnectorConfig config)
      : config_(std::move(config)), link_(std::make_shared<OwnerLink<ConnectorImpl>>(this)) {}
  ~ConnectorImpl();
  Status Init();

  Result<std::unique_ptr<StageHandle>> Publish(const StagePayload& p);
  Result<std::unique_ptr<ChunkStream>> Consume(const PayloadDescriptor& d, const TensorView& dst);
  Status Release(const PayloadDescriptor& d);
  Result<PayloadView> ConsumeInPlace(const PayloadDescriptor& d);
  void Forget(const void* data) { regs_->Forget(data); }
  // shared_tensor.cc.
  Result<SharedTensor> AllocateTensor(DType dtype, const std::vector<std::int64_t>& shape);

  TransferEngine& engine() { return *engine_; }
  Status Warm() { return store_ == nullptr ? Status::Ok() : store_->Warm(); }
  std::uint64_t bytes_copied() const { return store_ == nullptr ? 0 : store_->bytes_staged(); }
  const ConnectorConfig& config() const { return config_; }

 private:
  // The channel of `mode` (kP2p or kStore); null: store mode without a store.
  Channel* ChannelFor(TransferMode mode);

  ConnectorConfig config_;
  // How SharedTensors drop their registrations while the connector lives.
  std::shared_ptr<OwnerLink<ConnectorImpl>> link_;
  std::unique_ptr<TransferEngine> engine_;
  std::unique_ptr<StoreClient> store_;
  std::unique_ptr<RegistrationCache> regs_;
  std::unique_ptr<Channel> p2p_;
  std::unique_ptr<Channel> store_channel_;  // Null without a store.
};

}  // namespace sluice::internal

#endif  // SLUICE_CONNECTOR_CONNECTOR_IMPL_H_
