// The device backend interface: what the engine and the connector need from
// an accelerator runtime, and nothing more. Device memory is allocated,
// freed and moved only through a backend; copies are asynchronous on a
// stream and complete in stream order; events mark points in a stream;
// IPC handles let a same-host process open another's allocation; pointer
// attributes say what a pointer is.
//
// Implementations: `sim` (sim_backend.h: host memory that behaves like a
// device, so every device path runs without one) and `cuda` (the CUDA
// runtime, when the build finds the toolkit).
#ifndef SLUICE_DEVICE_BACKEND_H_
#define SLUICE_DEVICE_BACKEND_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sluice/memory.h"
#include "sluice/status.h"

namespace sluice::device {

// An ordered queue of copies on one device. Valid until DestroyStream().
struct Stream {
  std::uint64_t value = 0;
  friend bool operator==(Stream, Stream) = default;
};

// A point in a stream, re-recordable. Valid until DestroyEvent().
struct Event {
  std::uint64_t value = 0;
  friend bool operator==(Event, Event) = default;
};

// What a pointer is. `base` and `length` describe the whole allocation the
// pointer lies in (for host memory the backend does not know: the pointer
// itself and 0).
struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;  // -1 for host memory.
  const void* base = nullptr;
  std::size_t length = 0;
};

// An allocation exported for another process on this host; opaque bytes,
// safe to send over any channel. Opening it needs the exporter alive. Room
// for a runtime's own 64-byte handle and what it does not say (length,
// device).
struct IpcHandle {
  std::array<std::byte, 96> bytes{};
};

// Thread-safe: every method may be called from any thread.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  virtual std::string_view name() const = 0;
  virtual int DeviceCount() const = 0;

  // `len` bytes of device memory on `device`, never touched by the CPU.
  // Errors: kInvalidArgument (bad device, zero length), kResourceExhausted.
  virtual Result<void*> Allocate(int device, std::size_t len) = 0;
  // Frees an Allocate() result. Copies still queued on it must have
  // completed (wait on an event recorded after them).
  // Errors: kInvalidArgument when `ptr` is not an allocation's base.
  virtual Status Free(void* ptr) = 0;

  // Host memory fit for asynchronous copies (page-locked where that
  // matters), pre-faulted. Errors as Allocate().
  virtual Result<void*> AllocatePinned(std::size_t len) = 0;
  virtual Status FreePinned(void* ptr) = 0;

  virtual Result<Stream> CreateStream(int device) = 0;
  // Waits for the stream's queued copies, then destroys it.
  virtual Status DestroyStream(Stream stream) = 0;

  // Queues a copy of `len` bytes from `src` to `dst` on `stream`; either
  // side may be device memory (of any device, or opened by OpenIpc) or host
  // memory. Both ranges must stay valid until the copy completes. Checks
  // that a device range lies inside its allocation before queueing.
  // Errors: kInvalidArgument (a range outside its allocation, null
  // pointers, unknown stream); a copy that fails later fails the events
  // recorded after it.
  virtual Status CopyAsync(void* dst, const void* src, std::size_t len, Stream stream) = 0;

  virtual Result<Event> CreateEvent() = 0;
  virtual Status DestroyEvent(Event event) = 0;
  // Marks the point after everything queued on `stream` so far.
  virtual Status Record(Event event, Stream stream) = 0;
  // Whether the copies before the event's last Record() are done; an error
  // when one of them failed. An event never recorded is done.
  virtual Result<bool> Query(Event event) = 0;
  // Waits until Query() would answer true. Errors: kDeadlineExceeded after
  // `timeout`, or the failure of a copy before the event.
  virtual Status Wait(Event event, std::chrono::milliseconds timeout) = 0;

  virtual Result<PointerInfo> Attributes(const void* ptr) const = 0;

  // Exports the allocation whose base is `ptr`.
  virtual Result<IpcHandle> ExportIpc(void* ptr) = 0;
  // Opens another process's exported allocation here; the result is device
  // memory to copy with and to close with CloseIpc(). Errors:
  // kInvalidArgument (not a handle of this backend), kUnavailable (the
  // exporter is gone or the kernel refuses).
  virtual Result<void*> OpenIpc(const IpcHandle& handle) = 0;
  virtual Status CloseIpc(void* ptr) = 0;
};

}  // namespace sluice::device

#endif  // SLUICE_DEVICE_BACKEND_H_
