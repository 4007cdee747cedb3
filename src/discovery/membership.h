// Roles in etcd: a Publisher keeps entries (a role's endpoints) under a
// lease it renews, so they vanish within the lease's ttl when the process
// dies; an Election makes one of several processes the leader of a key
// (the key created under the leader's lease), and tells the leader when it
// lost the lease, so it stops acting as one. Resolve waits for a key.
#ifndef SLUICE_DISCOVERY_MEMBERSHIP_H_
#define SLUICE_DISCOVERY_MEMBERSHIP_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "discovery/etcd_client.h"

namespace sluice::discovery {

// The keys of a cluster's roles: "/sluice/<cluster>/<role>/..." .
std::string RoleKey(const std::string& cluster, const std::string& role);
// The key of a role's leader (an Election's): RoleKey + "/leader".
std::string LeaderKey(const std::string& cluster, const std::string& role);

class Publisher {
 public:
  // Puts every (key, value) of `entries` under a lease of `ttl` and renews
  // it every ttl/3 on a thread; a lease etcd no longer has (it expired while
  // etcd was unreachable) is replaced and the entries put again. `etcd`
  // must outlive it. Errors: the first grant's or put's.
  static Result<std::unique_ptr<Publisher>> Start(
      EtcdClient* etcd, std::vector<std::pair<std::string, std::string>> entries,
      std::chrono::seconds ttl);
  // Revokes the lease: the entries are gone at once.
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // Times the entries were put again under a new lease.
  int republished() const { return republished_.load(); }
  // Times etcd renewed the lease (every ttl/3).
  int renewed() const { return renewed_.load(); }

 private:
  Publisher(EtcdClient* etcd, std::vector<std::pair<std::string, std::string>> entries,
            std::chrono::seconds ttl);
  Status PutAll(std::int64_t lease);
  void Run();

  EtcdClient* const etcd_;
  const std::vector<std::pair<std::string, std::string>> entries_;
  const std::chrono::seconds ttl_;
  std::atomic<std::int64_t> lease_{0};
  std::atomic<int> republished_{0};
  std::atomic<int> renewed_{0};
  Mutex mu_;
  CondVar cv_;
  bool stop_ SLUICE_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class Election {
 public:
  // Campaigns for `key` with `value` (what followers learn of the leader,
  // e.g. its endpoint): creates the key under a lease of `ttl` when it is
  // absent, else polls every `poll` until it is. Returns once this process
  // leads; `stop` returning true ends the campaign (kCancelled). etcd being
  // unreachable is waited out (logged). `etcd` must outlive it.
  static Result<std::unique_ptr<Election>> Campaign(EtcdClient* etcd, std::string key,
                                                    std::string value, std::chrono::seconds ttl,
                                                    std::chrono::milliseconds poll,
                                                    const std::function<bool()>& stop);
  // Resigns: revokes the lease, so a follower leads at its next poll.
  ~Election();
  Election(const Election&) = delete;
  Election& operator=(const Election&) = delete;

  // False once leadership is lost: the lease expired, or was not renewed
  // for a whole ttl (etcd unreachable: it may have expired there). By then
  // `on_lost` (given before) has returned, having run once on the
  // election's thread.
  bool leading() const { return leading_.load(); }
  // Sets what runs once when leadership is lost; given after the loss, it
  // runs at once on the caller's thread. Replaces an earlier callback.
  void OnLost(std::function<void()> on_lost);
  // Replaces the key's value (under the same lease): a leader that
  // campaigned before it knew its endpoints publishes them once it serves.
  Status Publish(const std::string& value) { return etcd_->Put(key_, value, lease_); }
  // The leader's key and the lease it is held under: writes made only while
  // this process leads compare them (EtcdClient::Txn's fence).
  const std::string& key() const { return key_; }
  std::int64_t lease() const { return lease_; }

 private:
  Election(EtcdClient* etcd, std::string key, std::int64_t lease, std::chrono::seconds ttl);
  void Run();
  void Lose(const std::string& why);

  EtcdClient* const etcd_;
  const std::string key_;
  const std::int64_t lease_;
  const std::chrono::seconds ttl_;
  std::atomic<bool> leading_{true};
  Mutex mu_;
  CondVar cv_;
  bool stop_ SLUICE_GUARDED_BY(mu_) = false;
  bool lost_ SLUICE_GUARDED_BY(mu_) = false;  // Set before on_lost_ runs; leading_ after.
  std::function<void()> on_lost_ SLUICE_GUARDED_BY(mu_);
  std::thread thread_;
};

// The value of `key` once it exists and is not empty (polled every `poll`;
// a leader's key is empty until it serves), e.g. the leading master's
// endpoint. Errors: kDeadlineExceeded after `timeout`
// (naming the key and etcd's last failure, if any).
Result<std::string> Resolve(EtcdClient* etcd, const std::string& key,
                            std::chrono::milliseconds timeout,
                            std::chrono::milliseconds poll = std::chrono::milliseconds(200));

}  // namespace sluice::discovery

#endif  // SLUICE_DISCOVERY_MEMBERSHIP_H_
