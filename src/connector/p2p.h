// p2p mode: consumers read chunks straight from the producer's registered
// buffer; control messages ride on engine notifies (see p2p.cc).
#ifndef SLUICE_CONNECTOR_P2P_H_
#define SLUICE_CONNECTOR_P2P_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "connector/connector_impl.h"

namespace sluice::internal {

class P2pChannel final : public Channel {
 public:
  // `engine` and `regs` must outlive the channel. Starts its control thread
  // (READY, RELEASE, GONE: never blocks on a peer) and its pool for
  // SUBSCRIBE answers (each opens a segment back to its consumer, which
  // may block up to the engine's connect timeout).
  P2pChannel(TransferEngine& engine, RegistrationCache& regs);
  ~P2pChannel() override { Shutdown(); }

  Status Publish(const std::shared_ptr<HandleState>& h, const StagePayload& p) override;
  Status Consume(const std::shared_ptr<StreamState>& s) override;
  Result<PayloadView> ConsumeInPlace(const PayloadDescriptor& d) override;
  Status Release(const PayloadDescriptor& d) override;
  void Shutdown() override;
  // A control message from the engine's notify handler: queued for the
  // control thread (dropped, and logged, past 65536 waiting).
  void OnNotify(const std::string& sender, std::string msg);

 private:
  void ControlLoop();
  // A consumer's SUBSCRIBE to `payload` (its stream id `stream`): opens a
  // segment back to `sender` and announces the chunks ready so far (or that
  // the payload is gone). Runs on answer_pool_: it may block.
  void AnswerSubscribe(const std::string& sender, std::uint64_t payload, std::uint64_t stream);
  void Fetch(const std::shared_ptr<StreamState>& s, int first, int count);

  TransferEngine& engine_;
  RegistrationCache& regs_;
  // What handles and streams call back through: detached by Shutdown.
  std::shared_ptr<OwnerLink<P2pChannel>> link_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  std::map<std::uint64_t, std::shared_ptr<HandleState>> payloads_
      SLUICE_GUARDED_BY(mu_);  // By payload id.
  std::map<std::uint64_t, std::weak_ptr<StreamState>> streams_
      SLUICE_GUARDED_BY(mu_);  // By stream id.
  std::deque<std::pair<std::string, std::string>> inbox_
      SLUICE_GUARDED_BY(mu_);  // (sender, message).
  std::thread control_;
  std::unique_ptr<ElasticPool> answer_pool_;
};

}  // namespace sluice::internal

#endif  // SLUICE_CONNECTOR_P2P_H_
