// _sluice: the C++ connector as a Python extension. Tensors arrive as raw
// (pointer, dtype, shape, memory, device) tuples that sluice/diffusion.py
// reads from each tensor's DLPack capsule (dlpack.cc), and it turns chunk
// indices back into views of the caller's tensor; errors leave as
// _sluice.StatusError(code, code_name, message), which the package maps to
// typed exceptions. Every call that can block releases the GIL.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <type_traits>

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "sluice/adapters.h"
#include "sluice/connector/connector.h"
#include "sluice/logging.h"
#include "sluice/runtime/reference_stages.h"
#include "sluice/runtime/stage_worker.h"

#include "binding_util.h"
#include "cache_binding.h"
#include "dlpack.h"
#include "engine_store.h"

namespace py = pybind11;

namespace sluice::python {
namespace {

PyObject* g_status_error = nullptr;

constexpr std::array<const char*, 15> kCodeNames = {"OK",
                                                    "CANCELLED",
                                                    "INVALID_ARGUMENT",
                                                    "NOT_FOUND",
                                                    "ALREADY_EXISTS",
                                                    "RESOURCE_EXHAUSTED",
                                                    "FAILED_PRECONDITION",
                                                    "UNAVAILABLE",
                                                    "DEADLINE_EXCEEDED",
                                                    "DATA_LOSS",
                                                    "PERMISSION_DENIED",
                                                    "UNIMPLEMENTED",
                                                    "INTERNAL",
                                                    "UNAUTHENTICATED",
                                                    "UNKNOWN"};

// `memory` is "host" or "device" (dlpack_tensor's answer).
TensorView View(std::uintptr_t ptr, const std::string& dtype, std::vector<std::int64_t> shape,
                const std::string& memory, int device) {
  return TensorView{reinterpret_cast<void*>(ptr),
                    Unwrap(ParseDType(dtype)),
                    std::move(shape),
                    {},
                    ParseMemory(memory),
                    device};
}

PayloadDescriptor Descriptor(const py::bytes& b) {
  return Unwrap(PayloadDescriptor::Decode(std::string(b)));
}

class Handle {
 public:
  explicit Handle(std::unique_ptr<StageHandle> h) : h_(std::move(h)) {}
  py::bytes descriptor() const { return py::bytes(h_->descriptor().Encode()); }
  std::string descriptor_json() const { return h_->descriptor().ToJson(); }
  std::string mode() const { return std::string(TransferModeName(h_->descriptor().mode)); }
  void mark_ready(int i) { Check(h_->MarkReady(i)); }
  void wait(double timeout_s) {
    const auto t = Ms(timeout_s);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = h_->Wait(t);
    }
    Check(s);
  }
  bool released() const { return h_->released(); }
  void wait_released(double timeout_s) {
    const auto t = Ms(timeout_s);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = h_->WaitReleased(t);
    }
    Check(s);
  }
  // Callbacks run on connector threads; they take the GIL to call Python.
  void on_complete(py::function cb) {
    auto shared = std::make_shared<py::function>(std::move(cb));
    h_->OnComplete([shared](const Status& s) {
      py::gil_scoped_acquire gil;
      try {
        (*shared)(static_cast<int>(s.code()), std::string(s.message()));
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("sluice on_complete callback");
      }
    });
  }
  void on_released(py::function cb) {
    auto shared = std::make_shared<py::function>(std::move(cb));
    h_->OnReleased([shared] {
      py::gil_scoped_acquire gil;
      try {
        (*shared)();
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("sluice on_released callback");
      }
    });
  }

 private:
  std::unique_ptr<StageHandle> h_;
};

class Stream {
 public:
  explicit Stream(std::unique_ptr<ChunkStream> s) : s_(std::move(s)) {}
  // (index, start, length) of the next landed chunk, or None after the last.
  std::optional<std::tuple<int, std::int64_t, std::int64_t>> next() {
    Result<std::optional<ChunkView>> c = InternalError("not run");
    {
      py::gil_scoped_release nogil;
      c = s_->Next();
    }
    std::optional<ChunkView> v = Unwrap(std::move(c));
    if (!v.has_value()) {
      return std::nullopt;
    }
    return std::make_tuple(v->index, v->start, v->length);
  }
  void close() {
    py::gil_scoped_release nogil;
    s_.reset();
  }

 private:
  std::unique_ptr<ChunkStream> s_;
};

// `n` bytes at `p` as a 1-D byte buffer (buffer protocol).
py::buffer_info Bytes(const void* p, std::uint64_t n, bool readonly) {
  return py::buffer_info(const_cast<void*>(p), 1, py::format_descriptor<std::uint8_t>::format(), 1,
                         {static_cast<py::ssize_t>(n)}, {1}, readonly);
}

// A connector-allocated tensor's memory, exposed as a writable byte buffer.
// sluice/diffusion.py wraps it in a numpy array or torch tensor, which keeps
// this object, and so the memory, alive.
class SharedMemory {
 public:
  explicit SharedMemory(SharedTensor t) : t_(std::move(t)) {}
  py::buffer_info Info() { return Bytes(t_.data(), t_.nbytes(), false); }

 private:
  SharedTensor t_;
};

// A payload read in place: the producer's memory mapped into this process,
// exposed read-only through the buffer protocol.
class MappedPayload {
 public:
  explicit MappedPayload(PayloadView v) : v_(std::move(v)) {}
  py::buffer_info Info() { return Bytes(v_.view.data, v_.view.nbytes(), true); }
  std::string dtype() const { return std::string(DTypeName(v_.view.dtype)); }
  std::vector<std::int64_t> shape() const { return v_.view.shape; }

 private:
  PayloadView v_;
};

class Connector {
 public:
  Connector(const std::string& role, const std::string& mode, const py::dict& store,
            const py::dict& engine, int store_threads, double consume_timeout_s,
            const py::dict& security) {
    ConnectorConfig c;
    Check(c.ApplyEnvironment());  // Explicit settings below win.
    if (!security.empty()) {
      c.security = LoadSecurityDict(security);
    }
    c.role = role;
    if (!mode.empty()) {
      c.mode = Unwrap(ParseTransferMode(mode));
    }
    ForEachKey(store, "store_config", {"master", "rpc_timeout_ms", "fast_lane"},
               [&](const std::string& k, const py::object& v) {
                 if (k == "master") {
                   c.store.master = As<std::string>(v, k);
                 } else if (k == "rpc_timeout_ms") {
                   c.store.rpc_timeout = std::chrono::milliseconds(As<std::int64_t>(v, k));
                 } else {
                   c.store.fast_lane = As<bool>(v, k);
                 }
               });
    ForEachKey(engine, "te_config", {"listen", "transports", "io_threads", "secret", "device"},
               [&](const std::string& k, const py::object& v) {
                 if (k == "device") {
                   c.engine.device = As<std::string>(v, k);
                 } else if (k == "listen") {
                   c.engine.listen = As<std::string>(v, k);
                 } else if (k == "transports") {
                   c.engine.transports = As<std::vector<std::string>>(v, k);
                 } else if (k == "io_threads") {
                   c.engine.io_threads = As<int>(v, k);
                 } else {
                   c.engine.secret = As<std::string>(v, k);
                 }
               });
    c.store_threads = store_threads;
    c.consume_timeout = Ms(consume_timeout_s);
    py::gil_scoped_release nogil;
    conn_ = Unwrap(DiffusionConnector::Create(std::move(c)));
  }

  Handle publish(const std::string& request_id, const std::string& kind, std::uintptr_t ptr,
                 const std::string& dtype, std::vector<std::int64_t> shape,
                 const std::string& memory, int device, int chunk_dim, int num_chunks,
                 const std::string& lease, bool progressive, const std::string& bound_consumer,
                 bool keep_buffer) {
    StagePayload p;
    p.request_id = request_id;
    p.kind = Unwrap(ParsePayloadKind(kind));
    p.tensor = View(ptr, dtype, std::move(shape), memory, device);
    p.chunk_dim = chunk_dim;
    p.num_chunks = num_chunks;
    p.lease = Unwrap(Lease::Parse(lease));
    p.progressive = progressive;
    p.bound_consumer = bound_consumer;
    p.keep_buffer = keep_buffer;
    return Handle(Unwrap(WithoutGil([&](DiffusionConnector& c) { return c.Publish(p); })));
  }

  Stream consume(const py::bytes& descriptor, std::uintptr_t ptr, const std::string& dtype,
                 std::vector<std::int64_t> shape, const std::string& memory, int device) {
    const PayloadDescriptor d = Descriptor(descriptor);
    const TensorView dst = View(ptr, dtype, std::move(shape), memory, device);
    return Stream(Unwrap(WithoutGil([&](DiffusionConnector& c) { return c.Consume(d, dst); })));
  }

  MappedPayload consume_in_place(const py::bytes& descriptor) {
    const PayloadDescriptor d = Descriptor(descriptor);
    return MappedPayload(
        Unwrap(WithoutGil([&](DiffusionConnector& c) { return c.ConsumeInPlace(d); })));
  }

  void release(const py::bytes& descriptor) {
    const PayloadDescriptor d = Descriptor(descriptor);
    Check(WithoutGil([&](DiffusionConnector& c) { return c.Release(d); }));
  }

  void warm() {
    Check(WithoutGil([](DiffusionConnector& c) { return c.Warm(); }));
  }

  SharedMemory allocate(const std::string& dtype, const std::vector<std::int64_t>& shape) {
    const DType d = Unwrap(ParseDType(dtype));
    // Without the GIL: pre-faulting a large tensor takes a while.
    return SharedMemory(
        Unwrap(WithoutGil([&](DiffusionConnector& c) { return c.AllocateTensor(d, shape); })));
  }

  void forget(std::uintptr_t ptr) { Conn()->Forget(reinterpret_cast<const void*>(ptr)); }
  std::string endpoint() { return Conn()->engine().endpoint(); }
  std::string role() { return Conn()->config().role; }
  std::string mode() { return std::string(TransferModeName(Conn()->config().mode)); }
  std::uint64_t bytes_copied() { return Conn()->bytes_copied_outside_transfers(); }
  void close() {
    std::shared_ptr<DiffusionConnector> c = std::move(conn_);  // Under the GIL.
    py::gil_scoped_release nogil;
    c.reset();  // Joins connector threads, whose callbacks may need the GIL.
  }

 private:
  // The connector, or kFailedPrecondition once close() ran. Called with the
  // GIL held (which guards conn_); a call holds its copy while it runs, so a
  // concurrent close() never frees the connector under it.
  std::shared_ptr<DiffusionConnector> Conn() {
    if (conn_ == nullptr) {
      throw StatusException{FailedPreconditionError("the connector is closed")};
    }
    return conn_;
  }

  // Runs fn(connector) without the GIL and returns its result. The call's
  // own reference ends there too, so a close() meanwhile ends the connector
  // without the GIL.
  template <typename Fn>
  std::invoke_result_t<Fn, DiffusionConnector&> WithoutGil(Fn fn) {
    std::shared_ptr<DiffusionConnector> c = Conn();
    py::gil_scoped_release nogil;
    auto out = fn(*c);
    c.reset();
    return out;
  }

  std::shared_ptr<DiffusionConnector> conn_;
};

// The context a Python stage handler sees; valid during the handler call.
class Context {
 public:
  explicit Context(StageContext* c) : c_(c) {}
  std::uint64_t job_id() const { return c_->job_id(); }
  std::string stage() const { return c_->stage(); }
  std::string model() const { return c_->model(); }
  std::string request_json() const { return c_->request_json(); }
  py::bytes input() const { return py::bytes(c_->input()); }
  int resume_step() const { return c_->resume_step(); }
  bool interactive() const { return c_->interactive(); }
  int reported_checkpoint() const { return c_->ReportedCheckpoint(); }
  void progress(int step, int steps, bool checkpointed) { c_->Progress(step, steps, checkpointed); }
  void preview(int step, const py::bytes& png) { c_->Preview(step, std::string(png)); }
  void first_output() { c_->FirstOutput(); }
  // Where the handler's time went: shown on the job's stage_done event.
  void add_timing(const std::string& phase, double seconds) {
    if (!IsTimingPhase(phase)) {
      Check(InvalidArgumentError("add_timing: phase '" + phase +
                                 "' is not 1..32 of [a-z_] (and not the worker's own 'start' "
                                 "or 'run')"));
    }
    if (!std::isfinite(seconds) || seconds < 0) {
      Check(InvalidArgumentError("add_timing: seconds must be finite and >= 0, got " +
                                 std::to_string(seconds)));
    }
    c_->AddTiming(phase, std::chrono::duration<double>(seconds));
  }
  // What the handler counted: shown on the job's stage_done event.
  void add_count(const std::string& name, std::int64_t n) {
    if (!IsCountName(name)) {
      Check(InvalidArgumentError("add_count: name '" + name + "' is not 1..32 of [a-z_]"));
    }
    if (n < 0) {
      Check(InvalidArgumentError("add_count: n must be >= 0, got " + std::to_string(n)));
    }
    c_->AddCount(name, n);
  }
  // What the worker holds after the run (StageContext::SetHeld).
  void set_held(std::vector<std::string> labels) {
    Check(CheckHeldLabels(labels));
    c_->SetHeld(std::move(labels));
  }
  void keep_alive() { c_->KeepAlive(); }
  bool should_stop() const { return c_->ShouldStop(); }
  bool should_checkpoint() const { return c_->ShouldCheckpoint(); }

 private:
  StageContext* c_;
};

// What a handler's exception tells the orchestrator: a sluice error keeps
// its code (InvalidArgumentError fails the job as the client's error,
// UnavailableError and ResourceExhaustedError are retried elsewhere),
// MemoryError and an out-of-memory error of a framework (a class named
// OutOfMemoryError, e.g. torch.cuda's) are kResourceExhausted, anything
// else kInternal. The message is the exception's own; the traceback, with
// its server paths, goes only to this process's log (logger
// "sluice.worker"). Runs holding the GIL.
Status HandlerError(py::error_already_set& e) {
  py::module_::import("logging")
      .attr("getLogger")("sluice.worker")
      .attr("error")("stage handler raised: %s", e.what());
  py::object value = e.value();
  py::object type = py::type::of(value);
  const std::string type_name = py::str(type.attr("__name__"));
  const std::string message = py::str(value);
  StatusCode code = StatusCode::kInternal;
  if (py::hasattr(value, "code") && py::isinstance<py::str>(value.attr("code"))) {
    const std::string name = py::str(value.attr("code"));
    for (std::size_t i = 1; i + 1 < kCodeNames.size(); ++i) {  // The last is "UNKNOWN".
      code = name == kCodeNames[i] ? static_cast<StatusCode>(i) : code;
    }
  }
  for (py::handle base : type.attr("__mro__")) {
    const std::string base_name = py::str(base.attr("__name__"));
    if (base_name == "MemoryError" || base_name == "OutOfMemoryError") {
      code = StatusCode::kResourceExhausted;
    }
  }
  return Status(code, code == StatusCode::kInternal ? type_name + ": " + message : message);
}

// A StageWorker whose handler is a Python callable: handler(ctx) returns
// (output: bytes, content_type: str, payload_keys: list[str], preempted: bool);
// a raised sluice error fails the assignment (retryable for
// UnavailableError / ResourceExhaustedError).
class Worker {
 public:
  Worker(const std::string& orchestrator, const std::string& stage, py::function handler,
         int capacity, std::vector<std::string> labels, const std::string& name, double heartbeat_s,
         std::vector<std::string> models, const std::string& pipeline, const py::dict& security,
         double assignment_timeout_s, const py::object& encoder, const py::list& caches,
         std::string image_size, std::string video_size, bool takes_picture) {
    StageWorkerConfig c;
    c.image_size = std::move(image_size);  // Checked by StageWorker::Start.
    c.video_size = std::move(video_size);
    c.takes_picture = takes_picture;
    if (!encoder.is_none()) {  // (id, version, params_json, text_fields)
      const auto e =
          encoder
              .cast<std::tuple<std::string, std::string, std::string, std::vector<std::string>>>();
      c.condition_encoder = cache::ConditionEncoder{
          std::get<0>(e), std::get<1>(e),
          std::get<2>(e).empty() ? std::vector<cache::Field>{}
                                 : Unwrap(cache::ParamsFromJson(std::get<2>(e))),
          std::get<3>(e)};
    }
    for (const py::handle h : caches) {
      c.caches.push_back(CacheOf(h));
    }
    caches_ = caches;  // The caches outlive the worker.
    c.security = LoadSecurityDict(security);
    c.assignment_timeout = Ms(assignment_timeout_s);
    c.orchestrator = orchestrator;
    c.stage = stage;
    c.models = std::move(models);
    c.pipeline = pipeline;
    c.capacity = capacity;
    c.labels = std::move(labels);
    c.name = name;
    c.heartbeat_interval = Ms(heartbeat_s);
    if (c.heartbeat_interval.count() <= 0) {
      throw StatusException{InvalidArgumentError("heartbeat must be at least 1 ms")};
    }
    auto fn = std::make_shared<py::function>(std::move(handler));
    handler_ = fn;
    StageHandler h = [fn](StageContext& ctx) -> Result<StageOutput> {
      py::gil_scoped_acquire gil;
      try {
        py::object r = (*fn)(Context(&ctx));
        auto t = r.cast<std::tuple<py::bytes, std::string, std::vector<std::string>, bool>>();
        StageOutput out;
        out.output = std::string(std::get<0>(t));
        out.type = std::get<1>(t);
        out.payload_keys = std::get<2>(t);
        out.preempted = std::get<3>(t);
        return out;
      } catch (py::error_already_set& e) {
        return HandlerError(e);
      } catch (const py::cast_error&) {
        return InternalError("handler must return (bytes, content_type, payload_keys, preempted)");
      }
    };
    py::gil_scoped_release nogil;
    worker_ = Unwrap(StageWorker::Start(std::move(c), std::move(h)));
  }
  void drain(double timeout_s) {
    const auto t = Ms(timeout_s);
    py::gil_scoped_release nogil;
    if (worker_) {
      worker_->Drain(t);
    }
  }
  std::uint64_t completed() const { return worker_ ? worker_->completed() : 0; }
  bool wait_registered(double timeout_s) {
    const auto t = Ms(timeout_s);
    py::gil_scoped_release nogil;
    return worker_ && worker_->WaitRegistered(t);
  }
  void close() {
    py::gil_scoped_release nogil;
    worker_.reset();
  }
  ~Worker() {
    if (worker_) {
      py::gil_scoped_release nogil;  // Handler threads need the GIL to finish.
      worker_.reset();
    }
  }

 private:
  py::list caches_;  // Before worker_: destroyed after it.
  std::shared_ptr<py::function> handler_;
  std::unique_ptr<StageWorker> worker_;
};

}  // namespace
}  // namespace sluice::python

PYBIND11_MODULE(_sluice, m) {
  using namespace sluice::python;
  m.doc() = "sluice C++ core (use the `sluice` package, not this module)";
  // Library users get warnings and errors only, unless SLUICE_LOG_LEVEL asks.
  const char* level = std::getenv("SLUICE_LOG_LEVEL");
  if (!sluice::SetLogLevel(level != nullptr ? level : "warn").ok()) {
    (void)sluice::SetLogLevel("warn");
  }
  g_status_error = PyErr_NewException("_sluice.StatusError", PyExc_RuntimeError, nullptr);
  m.attr("StatusError") = py::handle(g_status_error);
  m.attr("ADAPTER_LABEL_PREFIX") = std::string(sluice::kAdapterLabelPrefix);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) {
        std::rethrow_exception(p);
      }
    } catch (const StatusException& e) {
      const auto code = static_cast<std::size_t>(e.status.code());
      const char* name = code < kCodeNames.size() ? kCodeNames[code] : "UNKNOWN";
      py::tuple args =
          py::make_tuple(static_cast<int>(code), name, std::string(e.status.message()));
      PyErr_SetObject(g_status_error, args.ptr());
    }
  });

  py::class_<Handle>(m, "Handle")
      .def("descriptor", &Handle::descriptor)
      .def("descriptor_json", &Handle::descriptor_json)
      .def_property_readonly("mode", &Handle::mode)
      .def("mark_ready", &Handle::mark_ready)
      .def("wait", &Handle::wait)
      .def("released", &Handle::released)
      .def("wait_released", &Handle::wait_released)
      .def("on_complete", &Handle::on_complete)
      .def("on_released", &Handle::on_released);
  py::class_<Stream>(m, "Stream").def("next", &Stream::next).def("close", &Stream::close);
  py::class_<SharedMemory>(m, "SharedMemory", py::buffer_protocol())
      .def_buffer(&SharedMemory::Info);
  py::class_<MappedPayload>(m, "MappedPayload", py::buffer_protocol())
      .def_buffer(&MappedPayload::Info)
      .def_property_readonly("dtype", &MappedPayload::dtype)
      .def_property_readonly("shape", &MappedPayload::shape);
  py::class_<Connector>(m, "Connector")
      .def(py::init<const std::string&, const std::string&, const py::dict&, const py::dict&, int,
                    double, const py::dict&>())
      .def("publish", &Connector::publish)
      .def("consume", &Connector::consume)
      .def("release", &Connector::release)
      .def("warm", &Connector::warm)
      .def("forget", &Connector::forget)
      .def("allocate", &Connector::allocate)
      .def("consume_in_place", &Connector::consume_in_place)
      .def_property_readonly("endpoint", &Connector::endpoint)
      .def_property_readonly("role", &Connector::role)
      .def_property_readonly("mode", &Connector::mode)
      .def_property_readonly("bytes_copied_outside_transfers", &Connector::bytes_copied)
      .def("close", &Connector::close);
  py::class_<Context>(m, "StageContext")
      .def_property_readonly("job_id", &Context::job_id)
      .def_property_readonly("stage", &Context::stage)
      .def_property_readonly("model", &Context::model)
      .def_property_readonly("request_json", &Context::request_json)
      .def_property_readonly("input", &Context::input)
      .def_property_readonly("resume_step", &Context::resume_step)
      .def_property_readonly("interactive", &Context::interactive,
                             "The job is of the interactive class (a person waits on it): a "
                             "handler may trade throughput for its latency, e.g. step it "
                             "outside a batch.")
      .def_property_readonly("reported_checkpoint", &Context::reported_checkpoint)
      .def("progress", &Context::progress, py::arg("step"), py::arg("steps"),
           py::arg("checkpointed") = false)
      .def("preview", &Context::preview, py::arg("step"), py::arg("png"))
      .def("first_output", &Context::first_output)
      .def("add_timing", &Context::add_timing, py::arg("phase"), py::arg("seconds"))
      .def("add_count", &Context::add_count, py::arg("name"), py::arg("n"))
      .def("set_held", &Context::set_held, py::arg("labels"))
      .def("keep_alive", &Context::keep_alive)
      .def("should_stop", &Context::should_stop)
      .def("should_checkpoint", &Context::should_checkpoint);
  py::class_<Worker>(m, "Worker")
      .def(py::init<const std::string&, const std::string&, py::function, int,
                    std::vector<std::string>, const std::string&, double, std::vector<std::string>,
                    const std::string&, const py::dict&, double, const py::object&, const py::list&,
                    std::string, std::string, bool>())
      .def("drain", &Worker::drain)
      .def("wait_registered", &Worker::wait_registered)
      .def_property_readonly("completed", &Worker::completed)
      .def("close", &Worker::close);
  RegisterDlpack(m);
  RegisterEngineAndStore(m);
  RegisterCache(m);
  m.def("reference_checkpoint_key", [](const std::string& request_json, int step) {
    return Unwrap(sluice::ReferenceCheckpointKey(request_json, step));
  });
  // The reference condition encoder's version: the loaded weights' identity.
  m.def("reference_model_version", [] { return sluice::ReferenceConditionEncoder().version; });
  m.def("descriptor_to_json", [](const py::bytes& b) { return Descriptor(b).ToJson(); });
  m.def("descriptor_from_json", [](const std::string& j) {
    return py::bytes(Unwrap(sluice::PayloadDescriptor::FromJson(j)).Encode());
  });
}
