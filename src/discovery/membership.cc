#include "discovery/membership.h"

#include "common/log.h"

namespace sluice::discovery {

using Clock = std::chrono::steady_clock;

std::string RoleKey(const std::string& cluster, const std::string& role) {
  return "/sluice/" + cluster + "/" + role;
}

std::string LeaderKey(const std::string& cluster, const std::string& role) {
  return RoleKey(cluster, role) + "/leader";
}

Result<std::unique_ptr<Publisher>> Publisher::Start(
    EtcdClient* etcd, std::vector<std::pair<std::string, std::string>> entries,
    std::chrono::seconds ttl) {
  std::unique_ptr<Publisher> p(new Publisher(etcd, std::move(entries), ttl));
  SLUICE_ASSIGN_OR_RETURN(std::int64_t lease, etcd->Grant(ttl));
  p->lease_ = lease;
  SLUICE_RETURN_IF_ERROR(p->PutAll(lease));
  Publisher* self = p.get();
  p->thread_ = std::thread([self] { self->Run(); });
  return p;
}

Publisher::Publisher(EtcdClient* etcd, std::vector<std::pair<std::string, std::string>> entries,
                     std::chrono::seconds ttl)
    : etcd_(etcd), entries_(std::move(entries)), ttl_(ttl) {}

Publisher::~Publisher() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) {
    thread_.join();
  }
  (void)etcd_->Revoke(lease_.load());
}

Status Publisher::PutAll(std::int64_t lease) {
  for (const auto& [key, value] : entries_) {
    SLUICE_RETURN_IF_ERROR(etcd_->Put(key, value, lease));
  }
  return Status::Ok();
}

void Publisher::Run() {
  const auto period = std::chrono::duration_cast<std::chrono::milliseconds>(ttl_) / 3;
  MutexLock lock(mu_);
  while (!cv_.WaitFor(lock, period, [this]() SLUICE_REQUIRES(mu_) { return stop_; })) {
    mu_.Unlock();
    Status s = etcd_->KeepAlive(lease_.load());
    if (s.ok()) {
      ++renewed_;
    }
    if (s.code() == StatusCode::kNotFound) {
      // The lease is gone (it expired while etcd was out of reach): the
      // entries went with it. Publish them again.
      Result<std::int64_t> lease = etcd_->Grant(ttl_);
      s = lease.ok() ? PutAll(*lease) : lease.status();
      if (s.ok()) {
        lease_ = *lease;
        ++republished_;
        SLUICE_LOG(info, "etcd: lease expired; {} entries published again", entries_.size());
      }
    }
    if (!s.ok()) {
      SLUICE_LOG(warn, "etcd: keeping {} published: {}", entries_.front().first, s.ToString());
    }
    mu_.Lock();
  }
}

Result<std::unique_ptr<Election>> Election::Campaign(EtcdClient* etcd, std::string key,
                                                     std::string value, std::chrono::seconds ttl,
                                                     std::chrono::milliseconds poll,
                                                     const std::function<bool()>& stop) {
  std::int64_t lease = 0;
  Clock::time_point granted;
  bool told = false;
  std::string last_error;  // Logged once until it changes (etcd may be away for long).
  while (!stop()) {
    // A lease of our own, renewed while we wait so it is alive when we win.
    Status s;
    if (lease == 0 || Clock::now() - granted > ttl / 3) {
      if (lease != 0 && etcd->KeepAlive(lease).ok()) {
        granted = Clock::now();
      } else {
        Result<std::int64_t> l = etcd->Grant(ttl);
        s = l.status();
        lease = l.ok() ? *l : 0;
        granted = Clock::now();
      }
    }
    if (s.ok() && lease != 0) {
      Result<bool> won = etcd->CreateIfAbsent(key, value, lease);
      if (won.ok() && *won) {
        SLUICE_LOG(info, "etcd: leading {}", key);
        auto e = std::unique_ptr<Election>(new Election(etcd, std::move(key), lease, ttl));
        Election* self = e.get();
        e->thread_ = std::thread([self] { self->Run(); });
        return e;
      }
      s = won.status();
    }
    if (!s.ok()) {
      if (s.ToString() != last_error) {
        SLUICE_LOG(warn, "etcd: campaigning for {}: {} (retrying)", key, s.ToString());
        last_error = s.ToString();
      }
    } else if (!told) {
      SLUICE_LOG(info, "etcd: {} has a leader; standing by", key);
      told = true;
    }
    std::this_thread::sleep_for(poll);
  }
  if (lease != 0) {
    (void)etcd->Revoke(lease);
  }
  return Status(StatusCode::kCancelled, "etcd: campaign for " + key + " stopped");
}

Election::Election(EtcdClient* etcd, std::string key, std::int64_t lease, std::chrono::seconds ttl)
    : etcd_(etcd), key_(std::move(key)), lease_(lease), ttl_(ttl) {}

Election::~Election() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) {
    thread_.join();
  }
  if (leading_.load()) {
    (void)etcd_->Revoke(lease_);  // Resign: a follower leads at its next poll.
  }
}

void Election::OnLost(std::function<void()> on_lost) {
  bool lost = false;
  {
    MutexLock lock(mu_);
    lost = lost_;
    if (!lost) {
      on_lost_ = std::move(on_lost);
    }
  }
  if (lost && on_lost) {
    on_lost();
  }
}

void Election::Lose(const std::string& why) {
  std::function<void()> on_lost;
  {
    MutexLock lock(mu_);
    lost_ = true;
    on_lost = std::move(on_lost_);
  }
  SLUICE_LOG(error, "etcd: lost the lead of {}: {}", key_, why);
  if (on_lost) {
    on_lost();
  }
  leading_ = false;
}

void Election::Run() {
  const auto period = std::chrono::duration_cast<std::chrono::milliseconds>(ttl_) / 3;
  Clock::time_point renewed = Clock::now();
  MutexLock lock(mu_);
  while (!cv_.WaitFor(lock, period, [this]() SLUICE_REQUIRES(mu_) { return stop_; })) {
    mu_.Unlock();
    const Status s = etcd_->KeepAlive(lease_);
    std::string lost;
    if (s.ok()) {
      renewed = Clock::now();
    } else if (s.code() == StatusCode::kNotFound) {
      lost = "the lease expired";
    } else if (Clock::now() - renewed >= ttl_) {
      lost = "etcd unreachable for the lease's whole ttl (" + s.ToString() + ")";
    }
    if (!lost.empty()) {
      Lose(lost);
      mu_.Lock();
      return;
    }
    mu_.Lock();
  }
}

Result<std::string> Resolve(EtcdClient* etcd, const std::string& key,
                            std::chrono::milliseconds timeout, std::chrono::milliseconds poll) {
  const auto deadline = Clock::now() + timeout;
  Status last;
  while (true) {
    Result<std::optional<EtcdKv>> kv = etcd->Get(key);
    if (kv.ok() && kv->has_value() && !(*kv)->value.empty()) {
      return (*kv)->value;
    }
    last = kv.status();
    if (Clock::now() >= deadline) {
      return DeadlineExceededError("etcd: no " + key + " after " + std::to_string(timeout.count()) +
                                   " ms" + (last.ok() ? "" : " (" + last.ToString() + ")"));
    }
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace sluice::discovery
