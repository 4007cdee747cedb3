#include "device/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/log.h"
#include "common/mutex.h"

namespace sluice::device {
namespace {

// What an IpcHandle carries for this backend: the runtime's handle, then the
// allocation's length and device (the runtime's handle says neither).
struct WireHandle {
  cudaIpcMemHandle_t handle;
  std::uint64_t length;
  std::int32_t device;
  char magic[4];
};
static_assert(sizeof(WireHandle) <= sizeof(IpcHandle::bytes));
constexpr char kMagic[4] = {'S', 'L', 'C', 'U'};

// A runtime error as a Status naming the call; clears the thread's last
// error so the next call does not see it (sticky errors stay, as they must).
Status CudaStatus(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) {
    return Status::Ok();
  }
  (void)cudaGetLastError();
  std::string m = "cuda device: " + std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                  cudaGetErrorString(err) + ")";
  switch (err) {
    case cudaErrorMemoryAllocation:
      return ResourceExhaustedError(m);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
      return InvalidArgumentError(m);
    case cudaErrorMapBufferObjectFailed:
    case cudaErrorDeviceUninitialized:
      return UnavailableError(m, FailureScope::kEndpoint);
    default:
      return InternalError(m);
  }
}

struct Alloc {
  int device = 0;
  std::size_t length = 0;
  bool opened = false;  // By OpenIpc: another process's memory.
};

struct StreamState {
  int device = 0;
  cudaStream_t stream = nullptr;
};

// A CUDA event lives on one device; ours are re-made on the device of the
// stream they are recorded on.
struct EventState {
  Mutex mu;
  cudaEvent_t event SLUICE_GUARDED_BY(mu) = nullptr;
  int device SLUICE_GUARDED_BY(mu) = -1;
};

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(int devices) : devices_(devices) {}

  ~CudaBackend() override {
    MutexLock lock(mu_);
    for (auto& [id, s] : streams_) {
      (void)cudaSetDevice(s.device);
      (void)cudaStreamSynchronize(s.stream);
      (void)cudaStreamDestroy(s.stream);
    }
    for (auto& [id, e] : events_) {
      MutexLock el(e->mu);
      if (e->event != nullptr) {
        (void)cudaEventDestroy(e->event);
      }
    }
    for (void* p : pinned_) {
      (void)cudaFreeHost(p);
    }
    WriterLock al(allocs_mu_);
    for (auto& [base, a] : allocs_) {
      (void)cudaSetDevice(a.device);
      void* p = reinterpret_cast<void*>(base);
      (void)(a.opened ? cudaIpcCloseMemHandle(p) : cudaFree(p));
    }
  }

  std::string_view name() const override { return "cuda"; }
  int DeviceCount() const override { return devices_; }

  Result<void*> Allocate(int device, std::size_t len) override {
    SLUICE_RETURN_IF_ERROR(CheckDevice(device));
    if (len == 0) {
      return InvalidArgumentError("cuda device: Allocate of 0 bytes");
    }
    SLUICE_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
    void* p = nullptr;
    SLUICE_RETURN_IF_ERROR(CudaStatus(
        cudaMalloc(&p, len),
        "cudaMalloc of " + std::to_string(len) + " bytes on device " + std::to_string(device)));
    WriterLock lock(allocs_mu_);
    allocs_[reinterpret_cast<std::uintptr_t>(p)] = Alloc{device, len, false};
    return p;
  }

  Status Free(void* ptr) override {
    SLUICE_ASSIGN_OR_RETURN(Alloc a, Take(ptr, /*opened=*/false, "Free"));
    (void)cudaSetDevice(a.device);
    return CudaStatus(cudaFree(ptr), "cudaFree");
  }

  Result<void*> AllocatePinned(std::size_t len) override {
    if (len == 0) {
      return InvalidArgumentError("cuda device: AllocatePinned of 0 bytes");
    }
    void* p = nullptr;
    SLUICE_RETURN_IF_ERROR(CudaStatus(cudaHostAlloc(&p, len, cudaHostAllocPortable),
                                      "cudaHostAlloc of " + std::to_string(len) + " bytes"));
    std::memset(p, 0, len);  // Pre-faulted: first use costs no page faults.
    MutexLock lock(mu_);
    pinned_.insert(p);
    return p;
  }

  Status FreePinned(void* ptr) override {
    {
      MutexLock lock(mu_);
      if (pinned_.erase(ptr) == 0) {
        return InvalidArgumentError(
            "cuda device: FreePinned of a pointer AllocatePinned did not "
            "return");
      }
    }
    return CudaStatus(cudaFreeHost(ptr), "cudaFreeHost");
  }

  Result<Stream> CreateStream(int device) override {
    SLUICE_RETURN_IF_ERROR(CheckDevice(device));
    SLUICE_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
    cudaStream_t s = nullptr;
    SLUICE_RETURN_IF_ERROR(
        CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
    MutexLock lock(mu_);
    const std::uint64_t id = next_id_++;
    streams_[id] = StreamState{device, s};
    return Stream{id};
  }

  Status DestroyStream(Stream stream) override {
    StreamState s;
    {
      MutexLock lock(mu_);
      auto it = streams_.find(stream.value);
      if (it == streams_.end()) {
        return UnknownStream(stream);
      }
      s = it->second;
      streams_.erase(it);
    }
    (void)cudaSetDevice(s.device);
    Status synced = CudaStatus(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
    Status destroyed = CudaStatus(cudaStreamDestroy(s.stream), "cudaStreamDestroy");
    return synced.ok() ? destroyed : synced;
  }

  Status CopyAsync(void* dst, const void* src, std::size_t len, Stream stream) override {
    if (dst == nullptr || src == nullptr || len == 0) {
      return InvalidArgumentError("cuda device: CopyAsync needs two buffers and a length");
    }
    {
      ReaderLock lock(allocs_mu_);
      SLUICE_RETURN_IF_ERROR(CheckRangeLocked(dst, len, "destination"));
      SLUICE_RETURN_IF_ERROR(CheckRangeLocked(src, len, "source"));
    }
    SLUICE_ASSIGN_OR_RETURN(StreamState s, FindStream(stream));
    SLUICE_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(s.device), "cudaSetDevice"));
    return CudaStatus(cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, s.stream),
                      "cudaMemcpyAsync of " + std::to_string(len) + " bytes");
  }

  Result<Event> CreateEvent() override {
    MutexLock lock(mu_);
    const std::uint64_t id = next_id_++;
    events_[id] = std::make_shared<EventState>();
    return Event{id};
  }

  Status DestroyEvent(Event event) override {
    std::shared_ptr<EventState> e;
    {
      MutexLock lock(mu_);
      auto it = events_.find(event.value);
      if (it == events_.end()) {
        return UnknownEvent(event);
      }
      e = std::move(it->second);
      events_.erase(it);
    }
    MutexLock lock(e->mu);
    return e->event == nullptr ? Status::Ok()
                               : CudaStatus(cudaEventDestroy(e->event), "cudaEventDestroy");
  }

  Status Record(Event event, Stream stream) override {
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<EventState> e, FindEvent(event));
    SLUICE_ASSIGN_OR_RETURN(StreamState s, FindStream(stream));
    SLUICE_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(s.device), "cudaSetDevice"));
    MutexLock lock(e->mu);
    if (e->event != nullptr && e->device != s.device) {
      (void)cudaEventDestroy(e->event);
      e->event = nullptr;
    }
    if (e->event == nullptr) {
      SLUICE_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming),
                                        "cudaEventCreate"));
      e->device = s.device;
    }
    return CudaStatus(cudaEventRecord(e->event, s.stream), "cudaEventRecord");
  }

  Result<bool> Query(Event event) override {
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<EventState> e, FindEvent(event));
    MutexLock lock(e->mu);
    if (e->event == nullptr) {
      return true;  // Never recorded.
    }
    const cudaError_t err = cudaEventQuery(e->event);
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    SLUICE_RETURN_IF_ERROR(CudaStatus(err, "a copy before the event"));
    return true;
  }

  Status Wait(Event event, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::microseconds(0);
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(bool done, Query(event));
      if (done) {
        return Status::Ok();
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return DeadlineExceededError("cuda device: event not reached in " +
                                     std::to_string(timeout.count()) + " ms");
      }
      // Spin briefly (copies of a few MiB end in microseconds), then back off
      // to at most 200 us between polls.
      if (pause.count() == 0) {
        std::this_thread::yield();
        pause = std::chrono::microseconds(1);
      } else {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(200));
      }
    }
  }

  Result<PointerInfo> Attributes(const void* ptr) const override {
    {
      ReaderLock lock(allocs_mu_);
      if (auto it = FindLocked(ptr); it != allocs_.end()) {
        return PointerInfo{MemoryKind::kDevice, it->second.device,
                           reinterpret_cast<const void*>(it->first), it->second.length};
      }
    }
    cudaPointerAttributes attr{};
    const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return PointerInfo{MemoryKind::kHost, -1, ptr, 0};
    }
    if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) {
      return PointerInfo{MemoryKind::kDevice, attr.device, ptr, 0};
    }
    return PointerInfo{MemoryKind::kHost, -1, ptr, 0};
  }

  Result<IpcHandle> ExportIpc(void* ptr) override {
    Alloc a;
    {
      ReaderLock lock(allocs_mu_);
      auto it = allocs_.find(reinterpret_cast<std::uintptr_t>(ptr));
      if (it == allocs_.end() || it->second.opened) {
        return InvalidArgumentError(
            "cuda device: ExportIpc needs the base of an allocation made here");
      }
      a = it->second;
    }
    WireHandle w{};
    SLUICE_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(a.device), "cudaSetDevice"));
    SLUICE_RETURN_IF_ERROR(CudaStatus(cudaIpcGetMemHandle(&w.handle, ptr), "cudaIpcGetMemHandle"));
    w.length = a.length;
    w.device = a.device;
    std::memcpy(w.magic, kMagic, sizeof(kMagic));
    IpcHandle h;
    std::memcpy(h.bytes.data(), &w, sizeof(w));
    return h;
  }

  Result<void*> OpenIpc(const IpcHandle& handle) override {
    WireHandle w;
    std::memcpy(&w, handle.bytes.data(), sizeof(w));
    if (std::memcmp(w.magic, kMagic, sizeof(kMagic)) != 0 || w.length == 0 || w.device < 0) {
      return InvalidArgumentError("cuda device: not an IPC handle of the cuda backend");
    }
    // The exporter's device where this process sees it, else device 0 (the
    // runtime enables peer access to reach it).
    const int device = w.device < devices_ ? w.device : 0;
    SLUICE_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
    void* p = nullptr;
    const cudaError_t err = cudaIpcOpenMemHandle(&p, w.handle, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      Status s = CudaStatus(err, "cudaIpcOpenMemHandle");
      return UnavailableError(s.message(), FailureScope::kEndpoint);
    }
    WriterLock lock(allocs_mu_);
    allocs_[reinterpret_cast<std::uintptr_t>(p)] = Alloc{device, w.length, true};
    return p;
  }

  Status CloseIpc(void* ptr) override {
    SLUICE_ASSIGN_OR_RETURN(Alloc a, Take(ptr, /*opened=*/true, "CloseIpc"));
    (void)cudaSetDevice(a.device);
    return CudaStatus(cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle");
  }

 private:
  using AllocMap = std::map<std::uintptr_t, Alloc>;

  Status CheckDevice(int device) const {
    if (device < 0 || device >= devices_) {
      return InvalidArgumentError("cuda device: no device " + std::to_string(device) + " (have " +
                                  std::to_string(devices_) + ")");
    }
    return Status::Ok();
  }

  // The allocation [ptr] lies in, or end().
  AllocMap::const_iterator FindLocked(const void* ptr) const SLUICE_REQUIRES_SHARED(allocs_mu_) {
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    auto it = allocs_.upper_bound(p);
    if (it == allocs_.begin()) {
      return allocs_.end();
    }
    --it;
    return p < it->first + it->second.length ? it : allocs_.end();
  }

  // A range starting inside one of this backend's allocations must end in
  // it; other pointers (host memory, a framework's allocations) are the
  // runtime's to check.
  Status CheckRangeLocked(const void* ptr, std::size_t len, const char* which) const
      SLUICE_REQUIRES_SHARED(allocs_mu_) {
    auto it = FindLocked(ptr);
    if (it == allocs_.end()) {
      return Status::Ok();
    }
    const std::size_t off = reinterpret_cast<std::uintptr_t>(ptr) - it->first;
    if (len > it->second.length - off) {
      return InvalidArgumentError("cuda device: copy " + std::string(which) + " of " +
                                  std::to_string(len) + " bytes at offset " + std::to_string(off) +
                                  " runs past its " + std::to_string(it->second.length) +
                                  "-byte allocation");
    }
    return Status::Ok();
  }

  Result<Alloc> Take(void* ptr, bool opened, const char* what) {
    WriterLock lock(allocs_mu_);
    auto it = allocs_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == allocs_.end() || it->second.opened != opened) {
      return InvalidArgumentError(std::string("cuda device: ") + what +
                                  " of a pointer that is not " +
                                  (opened ? "an opened IPC allocation" : "an allocation's base"));
    }
    Alloc a = it->second;
    allocs_.erase(it);
    return a;
  }

  static Status UnknownStream(Stream s) {
    return InvalidArgumentError("cuda device: unknown stream " + std::to_string(s.value));
  }
  static Status UnknownEvent(Event e) {
    return InvalidArgumentError("cuda device: unknown event " + std::to_string(e.value));
  }

  Result<StreamState> FindStream(Stream stream) {
    MutexLock lock(mu_);
    auto it = streams_.find(stream.value);
    if (it == streams_.end()) {
      return UnknownStream(stream);
    }
    return it->second;
  }

  Result<std::shared_ptr<EventState>> FindEvent(Event event) {
    MutexLock lock(mu_);
    auto it = events_.find(event.value);
    if (it == events_.end()) {
      return UnknownEvent(event);
    }
    return it->second;
  }

  const int devices_;
  mutable SharedMutex allocs_mu_;
  AllocMap allocs_ SLUICE_GUARDED_BY(allocs_mu_);
  Mutex mu_;
  std::unordered_set<void*> pinned_ SLUICE_GUARDED_BY(mu_);
  std::unordered_map<std::uint64_t, StreamState> streams_ SLUICE_GUARDED_BY(mu_);
  std::unordered_map<std::uint64_t, std::shared_ptr<EventState>> events_ SLUICE_GUARDED_BY(mu_);
  std::uint64_t next_id_ SLUICE_GUARDED_BY(mu_) = 1;
};

}  // namespace

bool CudaBuilt() {
  return true;
}

Result<std::unique_ptr<DeviceBackend>> MakeCudaBackend() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return UnavailableError(std::string("cuda device: no usable device: ") + cudaGetErrorName(err) +
                                " (" + cudaGetErrorString(err) + ")",
                            FailureScope::kTransport);
  }
  if (count == 0) {
    return UnavailableError("cuda device: the runtime sees no device", FailureScope::kTransport);
  }
  return std::unique_ptr<DeviceBackend>(new CudaBackend(count));
}

}  // namespace sluice::device
