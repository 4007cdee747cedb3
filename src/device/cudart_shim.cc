// The CUDA runtime, loaded when first used (dlopen of libcudart.so.13)
// instead of linked: one `sluice` binary and libsluice.so run on hosts with
// and without CUDA, and a package depends on no CUDA package. Each function
// cuda_backend.cc calls is defined here with the header's signature (the
// compiler checks it against <cuda_runtime_api.h>) and forwards to the
// library's; without the library each answers cudaErrorInsufficientDriver,
// whose error string says what could not be loaded.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>

namespace {

struct Runtime {
  void* handle = nullptr;
  std::string error;  // Why it could not be loaded.
};

const Runtime& Load() {
  static const Runtime rt = [] {
    Runtime r;
    for (const char* name : {"libcudart.so.13", "libcudart.so"}) {
      if ((r.handle = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) {
        return r;
      }
      const char* why = ::dlerror();
      r.error = "the CUDA runtime (libcudart.so.13) cannot be loaded: " +
                std::string(why != nullptr ? why : "not found");
    }
    return r;
  }();
  return rt;
}

template <typename F>
F Symbol(const char* name) {
  const Runtime& rt = Load();
  return rt.handle != nullptr ? reinterpret_cast<F>(::dlsym(rt.handle, name)) : nullptr;
}

}  // namespace

#define SLUICE_CUDART(name, params, args)                                \
  extern "C" cudaError_t CUDARTAPI name params {                         \
    static const auto f = Symbol<cudaError_t(CUDARTAPI*) params>(#name); \
    return f != nullptr ? f args : cudaErrorInsufficientDriver;          \
  }

SLUICE_CUDART(cudaSetDevice, (int device), (device))
SLUICE_CUDART(cudaGetDeviceCount, (int* count), (count))
SLUICE_CUDART(cudaGetLastError, (void), ())
SLUICE_CUDART(cudaMalloc, (void** p, size_t size), (p, size))
SLUICE_CUDART(cudaFree, (void* p), (p))
SLUICE_CUDART(cudaHostAlloc, (void** p, size_t size, unsigned int flags), (p, size, flags))
SLUICE_CUDART(cudaFreeHost, (void* p), (p))
SLUICE_CUDART(cudaMemcpyAsync,
              (void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
               cudaStream_t stream),
              (dst, src, count, kind, stream))
SLUICE_CUDART(cudaStreamCreate, (cudaStream_t * s), (s))
SLUICE_CUDART(cudaStreamCreateWithFlags, (cudaStream_t * s, unsigned int flags), (s, flags))
SLUICE_CUDART(cudaStreamDestroy, (cudaStream_t s), (s))
SLUICE_CUDART(cudaStreamSynchronize, (cudaStream_t s), (s))
SLUICE_CUDART(cudaEventCreate, (cudaEvent_t * e), (e))
SLUICE_CUDART(cudaEventCreateWithFlags, (cudaEvent_t * e, unsigned int flags), (e, flags))
SLUICE_CUDART(cudaEventDestroy, (cudaEvent_t e), (e))
SLUICE_CUDART(cudaEventRecord, (cudaEvent_t e, cudaStream_t s), (e, s))
SLUICE_CUDART(cudaEventQuery, (cudaEvent_t e), (e))
SLUICE_CUDART(cudaIpcGetMemHandle, (cudaIpcMemHandle_t * handle, void* p), (handle, p))
SLUICE_CUDART(cudaIpcOpenMemHandle, (void** p, cudaIpcMemHandle_t handle, unsigned int flags),
              (p, handle, flags))
SLUICE_CUDART(cudaIpcCloseMemHandle, (void* p), (p))
SLUICE_CUDART(cudaPointerGetAttributes, (struct cudaPointerAttributes * a, const void* p), (a, p))

#undef SLUICE_CUDART

extern "C" const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  static const auto f = Symbol<const char*(CUDARTAPI*)(cudaError_t)>("cudaGetErrorString");
  return f != nullptr ? f(error) : Load().error.c_str();
}

extern "C" const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  static const auto f = Symbol<const char*(CUDARTAPI*)(cudaError_t)>("cudaGetErrorName");
  return f != nullptr ? f(error) : "cudaErrorInsufficientDriver";
}
