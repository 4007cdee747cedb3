// store mode: each chunk is a store object written by the channel's put
// threads and read by its fetch pool (see store_mode.cc).
#ifndef SLUICE_CONNECTOR_STORE_MODE_H_
#define SLUICE_CONNECTOR_STORE_MODE_H_

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "connector/connector_impl.h"

namespace sluice::internal {

class StoreChannel final : public Channel {
 public:
  // `store` and `regs` must outlive the channel. `role` names its keys
  // ("sluice/<role>/..."); puts retry a full store for up to `timeout`;
  // `put_threads` (1..256) put chunks, a pool of up to 4096 threads reads
  // them (each consume may wait long for its producer).
  StoreChannel(StoreClient& store, RegistrationCache& regs, std::string role,
               std::chrono::milliseconds timeout, int put_threads);
  ~StoreChannel() override { Shutdown(); }

  Status Publish(const std::shared_ptr<HandleState>& h, const StagePayload& p) override;
  Status Consume(const std::shared_ptr<StreamState>& s) override;
  Result<PayloadView> ConsumeInPlace(const PayloadDescriptor& d) override;
  Status Release(const PayloadDescriptor& d) override;
  void Shutdown() override;

 private:
  void PutWorker();
  void RunTask(std::function<void()> task);
  void PutChunk(const std::shared_ptr<HandleState>& hs, int i);
  // Reads every chunk of `s` from the store (on fetch_pool_).
  void Fetch(const std::shared_ptr<StreamState>& s);

  StoreClient& store_;
  RegistrationCache& regs_;
  const std::string role_;
  const std::chrono::milliseconds timeout_;
  // What handles call back through: detached by Shutdown.
  std::shared_ptr<OwnerLink<StoreChannel>> link_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  std::deque<std::function<void()>> tasks_ SLUICE_GUARDED_BY(mu_);
  // Payloads this connector read whole (delete-on-consume already removed
  // them): Release needs no calls. Oldest first, bounded.
  std::deque<std::string> consumed_ SLUICE_GUARDED_BY(mu_);
  // Payloads not yet complete, failed with kCancelled on shutdown.
  std::vector<std::weak_ptr<HandleState>> pending_ SLUICE_GUARDED_BY(mu_);
  // Streams, told to stop on shutdown.
  std::vector<std::weak_ptr<StreamState>> streams_ SLUICE_GUARDED_BY(mu_);
  std::vector<std::thread> put_workers_;
  std::unique_ptr<ElasticPool> fetch_pool_;
};

}  // namespace sluice::internal

#endif  // SLUICE_CONNECTOR_STORE_MODE_H_
