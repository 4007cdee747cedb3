#include "dlpack.h"

#include <dlpack/dlpack.h>

#include <array>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "device/backends.h"

namespace py = pybind11;

namespace sluice::python {
namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr std::uint8_t kDLBoolCode = 6;  // DLPack 0.8's kDLBool; 0.6 has no bool.

struct DTypeCode {
  DType dtype;
  std::uint8_t code;
  std::uint8_t bits;
};
constexpr std::array<DTypeCode, 10> kDTypes = {{
    {DType::kBool, kDLBoolCode, 8},
    {DType::kU8, kDLUInt, 8},
    {DType::kI8, kDLInt, 8},
    {DType::kI16, kDLInt, 16},
    {DType::kI32, kDLInt, 32},
    {DType::kI64, kDLInt, 64},
    {DType::kF16, kDLFloat, 16},
    {DType::kBF16, kDLBfloat, 16},
    {DType::kF32, kDLFloat, 32},
    {DType::kF64, kDLFloat, 64},
}};

std::string DeviceTypeName(int type) {
  switch (type) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return "cuda";
    case kDLCUDAHost:
      return "cuda_host";
    case kDLOpenCL:
      return "opencl";
    case kDLVulkan:
      return "vulkan";
    case kDLMetal:
      return "metal";
    case kDLVPI:
      return "vpi";
    case kDLROCM:
      return "rocm";
    case kDLROCMHost:
      return "rocm_host";
    case kDLExtDev:
      return "sim";  // sluice's simulated devices export themselves as ext_dev.
    case kDLCUDAManaged:
      return "cuda_managed";
    default:
      return "device type " + std::to_string(type);
  }
}

[[noreturn]] void Refuse(const std::string& what, const std::string& why) {
  throw StatusException{InvalidArgumentError(what + ": " + why)};
}

// Device memory of the process's sim backend (what "sim" engines move), as
// a Python object: allocated zeroed, freed with the object, filled and read
// only through the backend's copies. Exported through DLPack as kDLExtDev.
class SimMemory {
 public:
  SimMemory(int device, std::uint64_t nbytes) : device_(device), size_(nbytes) {
    Result<device::DeviceBackend*> b = device::ProcessBackend("sim");
    if (!b.ok()) {
      throw StatusException{b.status()};
    }
    backend_ = *b;
    if (nbytes == 0 || nbytes > (std::uint64_t{1} << 40)) {
      throw StatusException{InvalidArgumentError("sim memory: size must be 1 B..1 TiB")};
    }
    Result<void*> p = backend_->Allocate(device, nbytes);
    if (!p.ok()) {
      throw StatusException{p.status()};
    }
    ptr_ = static_cast<char*>(*p);
    Result<device::Stream> s = backend_->CreateStream(device);
    Result<device::Event> e = backend_->CreateEvent();
    if (!s.ok() || !e.ok()) {
      (void)backend_->Free(ptr_);
      throw StatusException{s.ok() ? e.status() : s.status()};
    }
    stream_ = *s;
    event_ = *e;
    const std::vector<char> zeros(nbytes, 0);
    Copy(ptr_, zeros.data(), nbytes);
  }
  ~SimMemory() {
    (void)backend_->DestroyEvent(event_);
    (void)backend_->DestroyStream(stream_);
    (void)backend_->Free(ptr_);
  }
  SimMemory(const SimMemory&) = delete;
  SimMemory& operator=(const SimMemory&) = delete;

  std::uintptr_t ptr() const { return reinterpret_cast<std::uintptr_t>(ptr_); }
  int device() const { return device_; }
  std::uint64_t size() const { return size_; }

  // Copies host bytes in at `offset`.
  void Write(std::uint64_t offset, const py::buffer& data) {
    py::buffer_info info = data.request();
    const auto n = static_cast<std::uint64_t>(info.size * info.itemsize);
    CheckRange(offset, n);
    py::gil_scoped_release nogil;
    Copy(ptr_ + offset, info.ptr, n);
  }
  // `n` bytes from `offset`, copied out.
  py::bytes Read(std::uint64_t offset, std::uint64_t n) {
    CheckRange(offset, n);
    std::string out(n, '\0');
    {
      py::gil_scoped_release nogil;
      Copy(out.data(), ptr_ + offset, n);
    }
    return py::bytes(out);
  }

 private:
  void CheckRange(std::uint64_t offset, std::uint64_t n) const {
    if (offset > size_ || n > size_ - offset) {
      throw StatusException{InvalidArgumentError("sim memory: [" + std::to_string(offset) + ", +" +
                                                 std::to_string(n) + ") is outside its " +
                                                 std::to_string(size_) + " bytes")};
    }
  }
  void Copy(void* dst, const void* src, std::uint64_t n) {
    if (n == 0) {
      return;
    }
    Status s = backend_->CopyAsync(dst, src, n, stream_);
    if (s.ok()) {
      s = backend_->Record(event_, stream_);
    }
    if (s.ok()) {
      s = backend_->Wait(event_, std::chrono::seconds(30));
    }
    if (!s.ok()) {
      throw StatusException{s};
    }
  }

  device::DeviceBackend* backend_ = nullptr;
  const int device_;
  const std::uint64_t size_;
  char* ptr_ = nullptr;
  device::Stream stream_;
  device::Event event_;
};

// A DLManagedTensor over part of a SimMemory, holding a reference to it.
struct Exported {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  PyObject* owner = nullptr;
};

void DeleteExported(DLManagedTensor* self) {
  auto* e = static_cast<Exported*>(self->manager_ctx);
  py::gil_scoped_acquire gil;
  Py_XDECREF(e->owner);
  delete e;
}

// An unconsumed capsule still owns its tensor.
void DestroyCapsule(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kCapsuleName) != 0) {
    auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
    if (t != nullptr && t->deleter != nullptr) {
      t->deleter(t);
    }
  }
}

py::capsule ExportSim(const py::object& owner, std::uint64_t offset, const std::string& dtype,
                      std::vector<std::int64_t> shape, std::vector<std::int64_t> strides) {
  const auto& mem = owner.cast<const SimMemory&>();
  const Result<DType> d = ParseDType(dtype);
  if (!d.ok()) {
    throw StatusException{d.status()};
  }
  TensorView v{reinterpret_cast<void*>(mem.ptr() + offset),
               *d,
               shape,
               strides,
               MemoryKind::kDevice,
               mem.device()};
  Status valid = v.Validate("sim tensor");
  if (!valid.ok()) {
    throw StatusException{valid};
  }
  // The furthest element must lie inside the allocation.
  std::uint64_t last = 0;
  const std::vector<std::int64_t> st = strides.empty() ? RowMajorStrides(shape) : strides;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] > 0 && st[i] < 0) {
      Refuse("sim tensor", "negative strides");
    }
    last += shape[i] > 0 ? static_cast<std::uint64_t>(shape[i] - 1) * st[i] : 0;
  }
  if (offset > mem.size() || (v.numel() > 0 && (last + 1) * DTypeSize(*d) > mem.size() - offset)) {
    Refuse("sim tensor", "view runs past its memory");
  }
  auto* e = new Exported;
  e->shape = std::move(shape);
  e->strides = std::move(strides);
  e->owner = owner.inc_ref().ptr();
  DLTensor& t = e->managed.dl_tensor;
  t.data = reinterpret_cast<void*>(mem.ptr());
  t.byte_offset = offset;
  t.device = DLDevice{kDLExtDev, mem.device()};
  t.ndim = static_cast<int>(e->shape.size());
  for (const DTypeCode& c : kDTypes) {
    if (c.dtype == *d) {
      t.dtype = DLDataType{c.code, c.bits, 1};
    }
  }
  t.shape = e->shape.data();
  t.strides = e->strides.empty() ? nullptr : e->strides.data();
  e->managed.manager_ctx = e;
  e->managed.deleter = DeleteExported;
  PyObject* cap = PyCapsule_New(&e->managed, kCapsuleName, DestroyCapsule);
  if (cap == nullptr) {
    DeleteExported(&e->managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

}  // namespace

TensorView FromDlpack(const py::capsule& capsule, const std::string& what) {
  if (PyCapsule_IsValid(capsule.ptr(), kCapsuleName) == 0) {
    Refuse(what, "not an unconsumed DLPack capsule (\"dltensor\")");
  }
  const auto* managed =
      static_cast<const DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  const DLTensor& t = managed->dl_tensor;
  TensorView v;
  switch (t.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      v.memory = MemoryKind::kHost;
      v.device = -1;
      break;
    case kDLCUDA:
    case kDLExtDev:
      v.memory = MemoryKind::kDevice;
      v.device = t.device.device_id;
      break;
    default:
      Refuse(what, "tensors on " + DeviceTypeName(t.device.device_type) + ":" +
                       std::to_string(t.device.device_id) +
                       " are not supported (cpu, cuda, or sluice's sim device)");
  }
  if (t.dtype.lanes != 1) {
    Refuse(what, "vector dtypes (" + std::to_string(t.dtype.lanes) + " lanes) are not supported");
  }
  bool known = false;
  for (const DTypeCode& c : kDTypes) {
    if (c.code == t.dtype.code && c.bits == t.dtype.bits) {
      v.dtype = c.dtype;
      known = true;
    }
  }
  if (!known) {
    Refuse(what, "unsupported dtype (DLPack code " + std::to_string(t.dtype.code) + ", " +
                     std::to_string(t.dtype.bits) + " bits)");
  }
  if (t.ndim < 1 || t.ndim > 8) {
    Refuse(what, "rank must be 1..8, got " + std::to_string(t.ndim));
  }
  v.shape.assign(t.shape, t.shape + t.ndim);
  if (t.strides != nullptr) {
    // Row-major, except that a dimension of size 1 may carry any stride.
    const std::vector<std::int64_t> want = RowMajorStrides(v.shape);
    for (int i = 0; i < t.ndim; ++i) {
      if (v.shape[i] != 1 && t.strides[i] != want[i]) {
        const TensorView shape_only{nullptr, v.dtype, v.shape, {}};
        Refuse(what, "tensor " + shape_only.ToString() +
                         " is not contiguous (make it contiguous first: .contiguous(), "
                         "np.ascontiguousarray)");
      }
    }
  }
  v.data = static_cast<char*>(t.data) + t.byte_offset;
  Status s = v.Validate(what);
  if (!s.ok()) {
    throw StatusException{s};
  }
  return v;
}

void RegisterDlpack(py::module_& m) {
  m.def("dlpack_tensor", [](const py::capsule& capsule, const std::string& what) {
    const TensorView v = FromDlpack(capsule, what);
    return py::make_tuple(reinterpret_cast<std::uintptr_t>(v.data), std::string(DTypeName(v.dtype)),
                          v.shape, v.memory == MemoryKind::kDevice ? "device" : "host", v.device);
  });
  py::class_<SimMemory>(m, "SimMemory")
      .def(py::init<int, std::uint64_t>())
      .def_property_readonly("ptr", &SimMemory::ptr)
      .def_property_readonly("device", &SimMemory::device)
      .def_property_readonly("size", &SimMemory::size)
      .def("write", &SimMemory::Write)
      .def("read", &SimMemory::Read);
  m.def("sim_dlpack", &ExportSim);
}

}  // namespace sluice::python
