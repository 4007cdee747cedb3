// Internals of DiffusionConnector: per-payload producer state, per-consume
// stream state, the registration cache, the p2p control messages and the
// store-mode workers.
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

class ConnectorImpl;

// kFailedPrecondition: `d` cannot be read in place, because `why` (p2p.cc).
Status RefuseInPlace(const PayloadDescriptor& d, std::string_view why);

class ConnectorImpl {
 public:
  explicit ConnectorImpl(ConnectorConfig config)
      : config_(std::move(config)), link_(std::make_shared<OwnerLink<ConnectorImpl>>(this)) {}
  ~ConnectorImpl();
  Status Init();

  Result<std::unique_ptr<StageHandle>> Publish(const StagePayload& p);
  Result<std::unique_ptr<ChunkStream>> Consume(const PayloadDescriptor& d, const TensorView& dst);
  Status Release(const PayloadDescriptor& d);
  Result<PayloadView> ConsumeInPlace(const PayloadDescriptor& d);  // p2p.cc.
  void Forget(const void* data);
  // shared_tensor.cc.
  Result<SharedTensor> AllocateTensor(DType dtype, const std::vector<std::int64_t>& shape);

  TransferEngine& engine() { return *engine_; }
  Status Warm() { return store_ == nullptr ? Status::Ok() : store_->Warm(); }
  std::uint64_t bytes_copied() const { return store_ == nullptr ? 0 : store_->bytes_staged(); }
  const ConnectorConfig& config() const { return config_; }

 private:
  struct Registration {
    std::uint64_t len = 0;
    RegionKey key;
    Access access = Access::kLocalOnly;
  };
  // The region holding [data, data+len) with at least `access`, registering
  // (and dropping overlapping stale registrations) when needed. Returns the
  // region key and the offset of `data` in it.
  Result<std::pair<RegionKey, std::uint64_t>> Ensure(void* data, std::uint64_t len, Access access);

  // p2p (p2p.cc).
  Status PublishP2p(const std::shared_ptr<HandleState>& h, const StagePayload& p);
  Status ConsumeP2p(const std::shared_ptr<StreamState>& s);
  Status ReleaseP2p(const PayloadDescriptor& d);
  void OnNotify(const std::string& sender, std::string msg);
  void ControlLoop();
  // A consumer's SUBSCRIBE to `payload` (its stream id `stream`): opens a
  // segment back to `sender` and announces the chunks ready so far (or that
  // the payload is gone). Runs on a fetch_pool_ thread: it may block.
  void AnswerSubscribe(const std::string& sender, std::uint64_t payload, std::uint64_t stream);
  void FetchP2p(const std::shared_ptr<StreamState>& s, int first, int count);

  // store (store_mode.cc).
  Status PublishStore(const std::shared_ptr<HandleState>& h, const StagePayload& p);
  Status ConsumeStore(const std::shared_ptr<StreamState>& s);
  // Reads every chunk of `s` from the store (on a fetch_pool_ thread).
  void FetchStore(const std::shared_ptr<StreamState>& s);
  Status ReleaseStore(const PayloadDescriptor& d);
  Result<PayloadView> ConsumeInPlaceStore(const PayloadDescriptor& d);
  void StoreWorker();
  void PutChunk(const std::shared_ptr<HandleState>& hs, int i);
  void RunStoreTask(std::function<void()> task);

  ConnectorConfig config_;
  // How SharedTensors drop their registrations while the connector lives.
  std::shared_ptr<OwnerLink<ConnectorImpl>> link_;
  std::unique_ptr<TransferEngine> engine_;
  std::unique_ptr<StoreClient> store_;

  Mutex reg_mu_;
  std::map<std::uintptr_t, Registration> regs_ SLUICE_GUARDED_BY(reg_mu_);  // By start address.

  Mutex mu_;
  CondVar cv_;
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  std::map<std::uint64_t, std::shared_ptr<HandleState>> payloads_
      SLUICE_GUARDED_BY(mu_);  // p2p, by payload id.
  std::map<std::uint64_t, std::weak_ptr<StreamState>> streams_
      SLUICE_GUARDED_BY(mu_);  // p2p, by stream id.
  std::deque<std::pair<std::string, std::string>> inbox_
      SLUICE_GUARDED_BY(mu_);  // (sender, message).
  std::deque<std::function<void()>> store_tasks_ SLUICE_GUARDED_BY(mu_);
  // Store payloads this connector read whole (delete-on-consume already
  // removed them): Release needs no calls. Oldest first, bounded.
  std::deque<std::string> consumed_ SLUICE_GUARDED_BY(mu_);
  // Store payloads not yet complete, failed with kCancelled on shutdown.
  std::vector<std::weak_ptr<HandleState>> store_pending_ SLUICE_GUARDED_BY(mu_);
  // Store streams, told to stop on shutdown.
  std::vector<std::weak_ptr<StreamState>> store_streams_ SLUICE_GUARDED_BY(mu_);
  std::thread control_;
  std::vector<std::thread> store_workers_;
  // Store-mode consumes: one task per stream (each may wait long for its
  // producer), on reused threads.
  std::unique_ptr<ElasticPool> fetch_pool_;
};

}  // namespace sluice::internal

#endif  // SLUICE_CONNECTOR_CONNECTOR_IMPL_H_
