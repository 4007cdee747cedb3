#include "device/sim_backend.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <unordered_map>

#include "common/log.h"
#include "common/mutex.h"

namespace sluice::device {
namespace {

constexpr std::size_t kPage = 4096;
constexpr char kMagic[8] = {'S', 'L', 'S', 'I', 'M', 'I', 'P', 'C'};

std::string Errno(const char* what) {
  return std::string(what) + ": " + strerror(errno);
}

// One allocation: the PROT_NONE view handed out and the alias copies use.
struct Alloc {
  int device = 0;
  char* view = nullptr;
  char* alias = nullptr;
  std::size_t length = 0;  // As asked.
  std::size_t mapped = 0;  // Rounded up to pages.
  int memfd = -1;
  std::uint64_t inode = 0;
  bool opened = false;  // By OpenIpc: another process's memory.

  ~Alloc() {
    if (view != nullptr) {
      ::munmap(view, mapped);
    }
    if (alias != nullptr) {
      ::munmap(alias, mapped);
    }
    if (memfd >= 0) {
      ::close(memfd);
    }
  }
};

// Maps `fd` twice (view PROT_NONE, alias read-write). Pre-faults the alias
// when `populate` (fresh memory, as a device allocator commits it).
Status MapTwice(Alloc* a, bool populate) {
  void* view = ::mmap(nullptr, a->mapped, PROT_NONE, MAP_SHARED, a->memfd, 0);
  if (view == MAP_FAILED) {
    return ResourceExhaustedError(Errno("sim device: mmap of the device view"));
  }
  a->view = static_cast<char*>(view);
  void* alias = ::mmap(nullptr, a->mapped, PROT_READ | PROT_WRITE,
                       MAP_SHARED | (populate ? MAP_POPULATE : 0), a->memfd, 0);
  if (alias == MAP_FAILED) {
    return ResourceExhaustedError(Errno("sim device: mmap of the copy alias"));
  }
  a->alias = static_cast<char*>(alias);
  return Status::Ok();
}

struct EventState {
  Mutex mu;
  CondVar cv;
  std::uint64_t recorded SLUICE_GUARDED_BY(mu) = 0;
  std::uint64_t reached SLUICE_GUARDED_BY(mu) = 0;
};

// One stream: a FIFO of copies and event marks, drained by its own thread.
class SimStream {
 public:
  struct Item {
    char* dst = nullptr;
    const char* src = nullptr;
    std::size_t len = 0;
    std::shared_ptr<Alloc> keep_dst;  // Device memory stays mapped until copied.
    std::shared_ptr<Alloc> keep_src;
    std::shared_ptr<EventState> event;  // A mark when set.
    std::uint64_t generation = 0;
  };

  explicit SimStream(int device) : device_(device), thread_([this] { Run(); }) {}

  ~SimStream() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    cv_.NotifyAll();
    thread_.join();  // Run() drains what is queued first.
  }

  int device() const { return device_; }

  void Push(Item item) {
    {
      MutexLock lock(mu_);
      items_.push_back(std::move(item));
    }
    cv_.NotifyAll();
  }

 private:
  void Run() {
    MutexLock lock(mu_);
    while (true) {
      cv_.Wait(lock, [this]() SLUICE_REQUIRES(mu_) { return stopping_ || !items_.empty(); });
      if (items_.empty()) {
        return;  // Stopping, and drained.
      }
      Item item = std::move(items_.front());
      items_.pop_front();
      lock.Unlock();
      if (item.event != nullptr) {
        {
          MutexLock e(item.event->mu);
          item.event->reached = std::max(item.event->reached, item.generation);
        }
        item.event->cv.NotifyAll();
      } else {
        std::memmove(item.dst, item.src, item.len);
      }
      item = Item{};
      lock.Lock();
    }
  }

  const int device_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Item> items_ SLUICE_GUARDED_BY(mu_);
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The handle's bytes: magic, pid, fd, inode, length, device.
struct WireHandle {
  char magic[8];
  std::int32_t pid;
  std::int32_t fd;
  std::uint64_t inode;
  std::uint64_t length;
  std::int32_t device;
};
static_assert(sizeof(WireHandle) <= sizeof(IpcHandle::bytes));

class SimBackend final : public DeviceBackend {
 public:
  explicit SimBackend(const SimOptions& o) : options_(o), used_(o.devices, 0) {}

  ~SimBackend() override {
    // Streams drain before the allocations they copy go.
    MutexLock lock(mu_);
    streams_.clear();
  }

  std::string_view name() const override { return "sim"; }
  int DeviceCount() const override { return options_.devices; }

  Result<void*> Allocate(int device, std::size_t len) override {
    SLUICE_RETURN_IF_ERROR(CheckDevice(device));
    if (len == 0) {
      return InvalidArgumentError("sim device: Allocate of 0 bytes");
    }
    auto a = std::make_shared<Alloc>();
    a->device = device;
    a->length = len;
    a->mapped = (len + kPage - 1) / kPage * kPage;
    {
      MutexLock lock(mu_);
      if (a->mapped > options_.capacity - used_[device]) {
        return ResourceExhaustedError("sim device " + std::to_string(device) + ": " +
                                      std::to_string(len) + " bytes asked, " +
                                      std::to_string(options_.capacity - used_[device]) + " free");
      }
      used_[device] += a->mapped;
    }
    Status s = MakeMemory(a.get());
    if (!s.ok()) {
      MutexLock lock(mu_);
      used_[device] -= a->mapped;
      return s;
    }
    void* view = a->view;
    WriterLock lock(allocs_mu_);
    allocs_[reinterpret_cast<std::uintptr_t>(view)] = std::move(a);
    return view;
  }

  Status Free(void* ptr) override { return Drop(ptr, /*opened=*/false, "Free"); }

  Result<void*> AllocatePinned(std::size_t len) override {
    if (len == 0) {
      return InvalidArgumentError("sim device: AllocatePinned of 0 bytes");
    }
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
      return ResourceExhaustedError(Errno("sim device: AllocatePinned"));
    }
    MutexLock lock(mu_);
    pinned_[p] = len;
    return p;
  }

  Status FreePinned(void* ptr) override {
    std::size_t len = 0;
    {
      MutexLock lock(mu_);
      auto it = pinned_.find(ptr);
      if (it == pinned_.end()) {
        return InvalidArgumentError("sim device: FreePinned of memory AllocatePinned did not give");
      }
      len = it->second;
      pinned_.erase(it);
    }
    ::munmap(ptr, len);
    return Status::Ok();
  }

  Result<Stream> CreateStream(int device) override {
    SLUICE_RETURN_IF_ERROR(CheckDevice(device));
    auto s = std::make_shared<SimStream>(device);
    MutexLock lock(mu_);
    const Stream id{next_id_++};
    streams_[id.value] = std::move(s);
    return id;
  }

  Status DestroyStream(Stream stream) override {
    std::shared_ptr<SimStream> s;
    {
      MutexLock lock(mu_);
      auto it = streams_.find(stream.value);
      if (it == streams_.end()) {
        return InvalidArgumentError("sim device: unknown stream " + std::to_string(stream.value));
      }
      s = std::move(it->second);
      streams_.erase(it);
    }
    return Status::Ok();  // `s` drains and joins as it goes.
  }

  Status CopyAsync(void* dst, const void* src, std::size_t len, Stream stream) override {
    if (dst == nullptr || src == nullptr || len == 0) {
      return InvalidArgumentError("sim device: CopyAsync needs two buffers and a length");
    }
    SimStream::Item item;
    item.len = len;
    {
      ReaderLock lock(allocs_mu_);
      SLUICE_ASSIGN_OR_RETURN(item.dst, ResolveLocked(dst, len, "destination", &item.keep_dst));
      SLUICE_ASSIGN_OR_RETURN(const char* s, ResolveLocked(src, len, "source", &item.keep_src));
      item.src = s;
    }
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<SimStream> s, FindStream(stream));
    s->Push(std::move(item));
    return Status::Ok();
  }

  Result<Event> CreateEvent() override {
    MutexLock lock(mu_);
    const Event id{next_id_++};
    events_[id.value] = std::make_shared<EventState>();
    return id;
  }

  Status DestroyEvent(Event event) override {
    MutexLock lock(mu_);
    if (events_.erase(event.value) == 0) {
      return InvalidArgumentError("sim device: unknown event " + std::to_string(event.value));
    }
    return Status::Ok();
  }

  Status Record(Event event, Stream stream) override {
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<EventState> e, FindEvent(event));
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<SimStream> s, FindStream(stream));
    SimStream::Item mark;
    mark.event = e;
    {
      MutexLock lock(e->mu);
      mark.generation = ++e->recorded;
    }
    s->Push(std::move(mark));
    return Status::Ok();
  }

  Result<bool> Query(Event event) override {
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<EventState> e, FindEvent(event));
    MutexLock lock(e->mu);
    return e->reached >= e->recorded;
  }

  Status Wait(Event event, std::chrono::milliseconds timeout) override {
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<EventState> e, FindEvent(event));
    MutexLock lock(e->mu);
    if (!e->cv.WaitFor(lock, timeout,
                       [&]() SLUICE_REQUIRES(e->mu) { return e->reached >= e->recorded; })) {
      return DeadlineExceededError("sim device: event not reached in " +
                                   std::to_string(timeout.count()) + " ms");
    }
    return Status::Ok();
  }

  Result<PointerInfo> Attributes(const void* ptr) const override {
    ReaderLock lock(allocs_mu_);
    const Alloc* a = FindLocked(ptr);
    if (a == nullptr) {
      return PointerInfo{MemoryKind::kHost, -1, ptr, 0};
    }
    return PointerInfo{MemoryKind::kDevice, a->device, a->view, a->length};
  }

  Result<IpcHandle> ExportIpc(void* ptr) override {
    ReaderLock lock(allocs_mu_);
    auto it = allocs_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == allocs_.end() || it->second->opened) {
      return InvalidArgumentError(
          "sim device: ExportIpc needs the base of an allocation made here");
    }
    const Alloc& a = *it->second;
    WireHandle w{};
    std::memcpy(w.magic, kMagic, sizeof(kMagic));
    w.pid = ::getpid();
    w.fd = a.memfd;
    w.inode = a.inode;
    w.length = a.length;
    w.device = a.device;
    IpcHandle h;
    std::memcpy(h.bytes.data(), &w, sizeof(w));
    return h;
  }

  Result<void*> OpenIpc(const IpcHandle& handle) override {
    WireHandle w;
    std::memcpy(&w, handle.bytes.data(), sizeof(w));
    if (std::memcmp(w.magic, kMagic, sizeof(kMagic)) != 0 || w.pid <= 0 || w.fd < 0 ||
        w.length == 0 || w.device < 0) {
      return InvalidArgumentError("sim device: not an IPC handle of the sim backend");
    }
    const std::string path = "/proc/" + std::to_string(w.pid) + "/fd/" + std::to_string(w.fd);
    auto a = std::make_shared<Alloc>();
    a->memfd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (a->memfd < 0) {
      return UnavailableError(Errno(("sim device: open " + path).c_str()), FailureScope::kEndpoint);
    }
    struct stat st {};
    if (::fstat(a->memfd, &st) != 0 || st.st_ino != w.inode ||
        static_cast<std::uint64_t>(st.st_size) < w.length) {
      return UnavailableError("sim device: " + path + " is no longer the exported allocation",
                              FailureScope::kEndpoint);
    }
    a->device = w.device;
    a->length = w.length;
    a->mapped = static_cast<std::size_t>(st.st_size);
    a->inode = w.inode;
    a->opened = true;
    SLUICE_RETURN_IF_ERROR(MapTwice(a.get(), /*populate=*/false));
    void* view = a->view;
    WriterLock lock(allocs_mu_);
    allocs_[reinterpret_cast<std::uintptr_t>(view)] = std::move(a);
    return view;
  }

  Status CloseIpc(void* ptr) override { return Drop(ptr, /*opened=*/true, "CloseIpc"); }

 private:
  Status CheckDevice(int device) const {
    if (device < 0 || device >= options_.devices) {
      return InvalidArgumentError("sim device: no device " + std::to_string(device) + " (have " +
                                  std::to_string(options_.devices) + ")");
    }
    return Status::Ok();
  }

  Status MakeMemory(Alloc* a) {
    a->memfd = ::memfd_create("sluice-sim-device", MFD_CLOEXEC);
    if (a->memfd < 0) {
      return ResourceExhaustedError(Errno("sim device: memfd_create"));
    }
    if (::ftruncate(a->memfd, static_cast<off_t>(a->mapped)) != 0) {
      return ResourceExhaustedError(Errno("sim device: ftruncate"));
    }
    struct stat st {};
    if (::fstat(a->memfd, &st) != 0) {
      return InternalError(Errno("sim device: fstat"));
    }
    a->inode = st.st_ino;
    return MapTwice(a, /*populate=*/true);
  }

  Status Drop(void* ptr, bool opened, const char* what) {
    std::shared_ptr<Alloc> a;
    {
      WriterLock lock(allocs_mu_);
      auto it = allocs_.find(reinterpret_cast<std::uintptr_t>(ptr));
      if (it == allocs_.end() || it->second->opened != opened) {
        return InvalidArgumentError(std::string("sim device: ") + what +
                                    " of a pointer that is not " +
                                    (opened ? "an opened IPC allocation" : "an allocation's base"));
      }
      a = std::move(it->second);
      allocs_.erase(it);
    }
    if (!opened) {
      MutexLock lock(mu_);
      used_[a->device] -= a->mapped;
    }
    return Status::Ok();  // Unmapped when the last queued copy drops `a`.
  }

  const Alloc* FindLocked(const void* ptr) const SLUICE_REQUIRES_SHARED(allocs_mu_) {
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    auto it = allocs_.upper_bound(p);
    if (it == allocs_.begin()) {
      return nullptr;
    }
    --it;
    const Alloc& a = *it->second;
    return p < it->first + a.mapped ? &a : nullptr;
  }

  // The address a copy uses for [ptr, ptr + len): the alias for device
  // memory (checked to lie inside its allocation), `ptr` for host memory.
  Result<char*> ResolveLocked(const void* ptr, std::size_t len, const char* which,
                              std::shared_ptr<Alloc>* keep) const
      SLUICE_REQUIRES_SHARED(allocs_mu_) {
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    auto it = allocs_.upper_bound(p);
    if (it != allocs_.begin()) {
      --it;
      const Alloc& a = *it->second;
      const std::size_t off = p - it->first;
      if (off < a.mapped) {
        if (len > a.length || off > a.length - len) {
          return InvalidArgumentError(std::string("sim device: copy ") + which + " of " +
                                      std::to_string(len) + " bytes at offset " +
                                      std::to_string(off) + " runs past its " +
                                      std::to_string(a.length) + "-byte allocation");
        }
        *keep = it->second;
        return a.alias + off;
      }
    }
    return const_cast<char*>(static_cast<const char*>(ptr));
  }

  Result<std::shared_ptr<SimStream>> FindStream(Stream stream) {
    MutexLock lock(mu_);
    auto it = streams_.find(stream.value);
    if (it == streams_.end()) {
      return InvalidArgumentError("sim device: unknown stream " + std::to_string(stream.value));
    }
    return it->second;
  }

  Result<std::shared_ptr<EventState>> FindEvent(Event event) {
    MutexLock lock(mu_);
    auto it = events_.find(event.value);
    if (it == events_.end()) {
      return InvalidArgumentError("sim device: unknown event " + std::to_string(event.value));
    }
    return it->second;
  }

  const SimOptions options_;
  mutable SharedMutex allocs_mu_;
  std::map<std::uintptr_t, std::shared_ptr<Alloc>> allocs_ SLUICE_GUARDED_BY(allocs_mu_);
  Mutex mu_;
  std::vector<std::size_t> used_ SLUICE_GUARDED_BY(mu_);  // Per device.
  std::unordered_map<void*, std::size_t> pinned_ SLUICE_GUARDED_BY(mu_);
  std::unordered_map<std::uint64_t, std::shared_ptr<SimStream>> streams_ SLUICE_GUARDED_BY(mu_);
  std::unordered_map<std::uint64_t, std::shared_ptr<EventState>> events_ SLUICE_GUARDED_BY(mu_);
  std::uint64_t next_id_ SLUICE_GUARDED_BY(mu_) = 1;
};

}  // namespace

Result<std::unique_ptr<DeviceBackend>> MakeSimBackend(const SimOptions& options) {
  if (options.devices < 1 || options.devices > 16) {
    return InvalidArgumentError("sim device: devices must be in 1..16");
  }
  if (options.capacity < kPage) {
    return InvalidArgumentError("sim device: capacity must be at least 4 KiB");
  }
  return std::unique_ptr<DeviceBackend>(new SimBackend(options));
}

}  // namespace sluice::device
