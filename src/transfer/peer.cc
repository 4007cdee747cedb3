#include "transfer/peer.h"

#include "common/log.h"
#include "common/mutex.h"

namespace sluice::internal {

Peer::Peer(SegmentId id, std::string endpoint, HostPort hp)
    : id_(id),
      endpoint_(std::move(endpoint)),
      hp_(std::move(hp)),
      order_([this](std::string&& message) {
        std::shared_ptr<Link> l = link();
        if (l != nullptr && l->alive->load(std::memory_order_acquire)) {
          // A closed connection drops the notify; the writes it followed failed too.
          (void)l->conns[0]->EnqueueNotify(std::move(message));
        }
      }) {}

std::shared_ptr<Link> Peer::link() const {
  MutexLock lock(mu_);
  return link_;
}

void Peer::SetLink(std::shared_ptr<Link> link, RegionTable table) {
  MutexLock lock(mu_);
  link_ = std::move(link);
  table_version_ = 0;
  SetTableLocked(std::move(table));
}

void Peer::LinkDown(const std::shared_ptr<Link>& link, const Status& why) {
  bool expected = true;
  if (!link->alive->compare_exchange_strong(expected, false)) {
    return;
  }
  if (why.code() == StatusCode::kCancelled) {
    SLUICE_LOG(debug, "closed link to {}: {}", endpoint_, why.ToString());
  } else {
    SLUICE_LOG(warn, "lost peer {}: {}", endpoint_, why.ToString());
  }
  for (const auto& c : link->conns) {
    c->CloseAsync(why);
  }
  for (const auto& p : link->paths) {
    p->OnDown();
  }
}

void Peer::UpdateTable(RegionTable table) {
  std::shared_ptr<Link> link;
  {
    MutexLock lock(mu_);
    if (table.version <= table_version_) {
      return;
    }
    link = link_;
    SetTableLocked(table);
  }
  if (link != nullptr) {
    for (const auto& path : link->paths) {
      path->OnTable(table);
    }
  }
}

void Peer::SetTableLocked(RegionTable table) {
  table_version_ = table.version;
  regions_.clear();
  for (WireRegion& r : table.regions) {
    const std::uint64_t key = r.info.key.value;
    regions_[key] = std::make_shared<const WireRegion>(std::move(r));
  }
}

std::vector<RegionInfo> Peer::Regions() const {
  MutexLock lock(mu_);
  std::vector<RegionInfo> out;
  out.reserve(regions_.size());
  for (const auto& [key, r] : regions_) {
    out.push_back(r->info);
  }
  return out;
}

std::shared_ptr<const WireRegion> Peer::FindRegion(std::uint64_t key) const {
  MutexLock lock(mu_);
  auto it = regions_.find(key);
  return it == regions_.end() ? nullptr : it->second;
}

}  // namespace sluice::internal
