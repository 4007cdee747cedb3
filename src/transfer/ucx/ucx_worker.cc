#include "transfer/ucx/ucx_worker.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace sluice::internal {
namespace {

// The longest the worker's thread sleeps without looking at its deadlines.
constexpr int kTickMs = 50;

Status UcxError(std::string_view what, ucs_status_t s) {
  return UnavailableError("ucx: " + std::string(what) + ": " + ucs_status_string(s),
                          FailureScope::kTransport);
}

}  // namespace

Result<std::shared_ptr<UcxContext>> UcxContext::Create() {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) {
    return UcxError("reading its configuration", s);
  }
  // UCX's tcp moves a put in segments of 8 KiB by default: 0.8 GB/s for
  // 16 MiB writes on loopback here, 2.6 GB/s with 1 MiB segments
  // (docs/benchmarks/transfer.md). Set on this context only (the process's
  // environment, which children inherit, is left alone), when UCX may use
  // tcp (else it warns, on stdout, of settings nothing used) and the
  // environment does not set them.
  const char* tls = std::getenv("UCX_TLS");
  const std::string_view t = tls == nullptr ? "all" : tls;
  if (t.find("tcp") != t.npos || t.find("all") != t.npos || t.starts_with('^')) {
    for (const char* name : {"TX_SEG_SIZE", "RX_SEG_SIZE"}) {
      if (std::getenv(("UCX_TCP_" + std::string(name)).c_str()) == nullptr) {
        (void)ucp_config_modify(config, name, "1m");
      }
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;  // Memory is mapped from the registering threads.
  std::shared_ptr<UcxContext> out(new UcxContext());
  s = ucp_init(&params, config, &out->ctx_);
  ucp_config_release(config);
  if (s != UCS_OK) {
    out->ctx_ = nullptr;
    return UcxError("starting", s);
  }
  return out;
}

UcxContext::~UcxContext() {
  if (ctx_ != nullptr) {
    ucp_cleanup(ctx_);
  }
}

Result<std::shared_ptr<UcxMemory>> UcxMemory::Map(std::shared_ptr<UcxContext> ctx, void* addr,
                                                  std::size_t length, bool remote_read,
                                                  bool remote_write, std::string* rkey) {
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_PROT;
  params.address = addr;
  params.length = length;
  params.prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE |
                (remote_read ? UCP_MEM_MAP_PROT_REMOTE_READ : 0) |
                (remote_write ? UCP_MEM_MAP_PROT_REMOTE_WRITE : 0);
  std::shared_ptr<UcxMemory> out(new UcxMemory());
  ucs_status_t s = ucp_mem_map(ctx->get(), &params, &out->memh_);
  if (s != UCS_OK) {
    out->memh_ = nullptr;
    return UcxError("mapping memory", s);
  }
  out->ctx_ = std::move(ctx);
  void* packed = nullptr;
  std::size_t size = 0;
  s = ucp_rkey_pack(out->ctx_->get(), out->memh_, &packed, &size);
  if (s != UCS_OK) {
    return UcxError("packing a remote key", s);
  }
  rkey->assign(static_cast<const char*>(packed), size);
  ucp_rkey_buffer_release(packed);
  return out;
}

UcxMemory::~UcxMemory() {
  if (memh_ != nullptr) {
    ucs_status_t s = ucp_mem_unmap(ctx_->get(), memh_);
    if (s != UCS_OK) {
      SLUICE_LOG(warn, "ucx: unmapping memory: {}", ucs_status_string(s));
    }
  }
}

Result<std::shared_ptr<UcxWorker>> UcxWorker::Start(std::shared_ptr<UcxContext> ctx) {
  std::shared_ptr<UcxWorker> w(new UcxWorker());
  w->ctx_ = std::move(ctx);
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_status_t s = ucp_worker_create(w->ctx_->get(), &params, &w->worker_);
  if (s != UCS_OK) {
    w->worker_ = nullptr;
    return UcxError("creating a worker", s);
  }
  if (s = ucp_worker_get_efd(w->worker_, &w->worker_fd_); s != UCS_OK) {
    return UcxError("the worker's event fd", s);
  }
  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  if (s = ucp_worker_get_address(w->worker_, &address, &length); s != UCS_OK) {
    return UcxError("the worker's address", s);
  }
  w->address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(w->worker_, address);
  w->wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!w->wake_.valid()) {
    return UnavailableError(std::string("ucx: eventfd: ") + std::strerror(errno),
                            FailureScope::kTransport);
  }
  UcxWorker* self = w.get();
  w->thread_ = std::thread([self] {
    pthread_setname_np(pthread_self(), "sluice-ucx");
    self->Loop();
  });
  return w;
}

UcxWorker::~UcxWorker() {
  if (thread_.joinable()) {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    const std::uint64_t one = 1;
    (void)::write(wake_.get(), &one, sizeof(one));
    thread_.join();
  }
  if (worker_ != nullptr) {
    ucp_worker_destroy(worker_);
  }
}

void UcxWorker::Run(Work work) {
  {
    MutexLock lock(mu_);
    queue_.push_back(std::move(work));
  }
  const std::uint64_t one = 1;
  (void)::write(wake_.get(), &one, sizeof(one));
}

void UcxWorker::SetTick(std::function<void()> tick) {
  MutexLock lock(mu_);
  tick_ = std::move(tick);
}

void UcxWorker::Loop() {
  std::vector<Work> work;
  for (;;) {
    bool stop = false;
    std::function<void()> tick;
    {
      MutexLock lock(mu_);
      work.swap(queue_);
      stop = stopping_;
      tick = tick_;
    }
    for (Work& w : work) {
      w(worker_);
    }
    const bool had_work = !work.empty();
    work.clear();
    if (tick) {
      tick();
    }
    if (stop && !had_work) {
      return;
    }
    if (ucp_worker_progress(worker_) != 0 || had_work) {
      continue;
    }
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) {
      continue;  // Events came in since the progress: progress again.
    }
    pollfd fds[2] = {{worker_fd_, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    (void)::poll(fds, 2, kTickMs);
    if ((fds[1].revents & POLLIN) != 0) {
      std::uint64_t n = 0;
      (void)::read(wake_.get(), &n, sizeof(n));
    }
  }
}

}  // namespace sluice::internal
