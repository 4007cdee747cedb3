// A link from objects that may outlive their owner (a connector's tensors,
// a store client's views) back to it: they call in while it lives, and the
// owner's destructor detaches the link before anything they would touch
// goes away.
#ifndef SLUICE_COMMON_OWNER_LINK_H_
#define SLUICE_COMMON_OWNER_LINK_H_

#include "common/mutex.h"

namespace sluice::internal {

template <typename T>
class OwnerLink {
 public:
  explicit OwnerLink(T* owner) : owner_(owner) {}

  // Runs fn(owner) and returns true while the owner lives; returns false
  // without running fn once detached. The owner cannot be detached while
  // fn runs; calls from several threads run concurrently.
  template <typename Fn>
  bool Call(Fn&& fn) {
    ReaderLock lock(mu_);
    if (owner_ == nullptr) {
      return false;
    }
    fn(*owner_);
    return true;
  }

  // For the owner's destructor: waits for calls in flight; later calls do
  // nothing. Idempotent.
  void Detach() {
    WriterLock lock(mu_);
    owner_ = nullptr;
  }

 private:
  SharedMutex mu_;
  T* owner_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_OWNER_LINK_H_
