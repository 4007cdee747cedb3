"""DiffusionConnector: hand tensors from one diffusion stage to the next.

    from sluice.diffusion import DiffusionConnector, StagePayload

    conn = DiffusionConnector(role="denoise", transfer_mode="auto",
                              store_config={"master": "127.0.0.1:7100"})
    handle = conn.publish(StagePayload(request_id=req_id, kind="latent",
                                       tensor=latents, chunk_dim=2, num_chunks=8,
                                       lease="delete_on_consume"))
    msg = handle.descriptor()          # bytes for the queue message
    ...
    for chunk in conn.consume(msg, dst=dst):   # views into dst, in order
        decode_chunk(chunk)
    conn.release(msg)

Tensors of any framework that speaks DLPack (torch, numpy >= 1.22, CuPy,
JAX), contiguous, on the CPU or a CUDA device, are used in place: the
connector reads or writes their memory directly and never copies them. CUDA
tensors need te_config={"device": "cuda"}; `SimTensor` (device "sim", see
sluice.tensors) runs the device paths without a GPU.
A published tensor must stay unmodified until `handle.wait()` returns
(store mode) or the consumer released it (p2p: `handle.released()`); the
handle keeps a reference so it is not freed early.

Modes: "p2p" (the consumer reads the producer's buffer), "store" (through
the sluice store; the producer's buffer is free once published), "auto"
(p2p when `bound_consumer` is given and `keep_buffer` is true, else store;
p2p when there is no store).

Same-host p2p is fastest from tensors `conn.empty(shape, dtype)` allocated:
consumers map that memory and copy it with one memcpy.
`conn.empty(shape, dtype, device="cuda:0")` gives a framework tensor on the
device instead.

Configuration: `store_config` / `te_config` take dicts or StoreConfig /
TransferEngineConfig objects. When omitted, environment variables fill in:
SLUICE_MASTER (store master host:port), SLUICE_LISTEN (engine endpoint),
SLUICE_TRANSPORTS ("tcp,shm"); then defaults (no store, 127.0.0.1:0).
"""

import dataclasses
from typing import Any, Callable, Iterator, List, Optional, Union

from . import _sluice
from ._security import security_files
from .errors import InvalidArgumentError, from_status, translated
from .tensors import NUMPY_DTYPES as _NUMPY_DTYPES
from .tensors import SimTensor, describe, parse_device

__all__ = [
    "DiffusionConnector",
    "StagePayload",
    "StageHandle",
    "StoreConfig",
    "TransferEngineConfig",
    "descriptor_to_json",
    "descriptor_from_json",
    "SimTensor",
]

_FOREVER = 1e7  # Seconds: the longest wait the core accepts.

_TORCH_DTYPES = {
    "torch.bool": "bool",
    "torch.uint8": "u8",
    "torch.int8": "i8",
    "torch.int16": "i16",
    "torch.int32": "i32",
    "torch.int64": "i64",
    "torch.float16": "f16",
    "torch.bfloat16": "bf16",
    "torch.float32": "f32",
    "torch.float64": "f64",
}


_NUMPY_BY_NAME = {v: k for k, v in _NUMPY_DTYPES.items()}
# sluice dtype name -> torch dtype attribute ("bf16" -> "bfloat16").
_TORCH_BY_NAME = {v: k.split(".", 1)[1] for k, v in _TORCH_DTYPES.items()}


def _chunk_view(dst, dim: int, start: int, length: int):
    """A view of dst's [start, start+length) along `dim` (the whole of dst for -1),
    of dst's own type and device."""
    if dim < 0:
        return dst
    if hasattr(dst, "narrow"):  # torch, SimTensor
        return dst.narrow(dim, start, length)
    index = (slice(None),) * dim + (slice(start, start + length),)
    return dst[index]  # numpy, CuPy, JAX


@dataclasses.dataclass
class StoreConfig:
    """The connector's store client: the master's "host:port", the RPC
    timeout and whether to use the fast lane (unset: the core's defaults)."""

    master: Optional[str] = None  # "host:port" of the store master.
    rpc_timeout_ms: Optional[int] = None
    fast_lane: Optional[bool] = None

    def to_dict(self) -> dict:
        """The fields that are set, as the dict the connector takes."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass
class TransferEngineConfig:
    """The connector's transfer engine: listen address, transports, I/O
    threads, handshake secret and device backend (unset: the defaults)."""

    listen: Optional[str] = None  # "host:port"; port 0 picks one.
    transports: Optional[List[str]] = None  # Subset of ["tcp", "shm", "ucx"].
    io_threads: Optional[int] = None
    secret: Optional[str] = None
    device: Optional[str] = None  # Device backend for device tensors: "cuda" or "sim".

    def to_dict(self) -> dict:
        """The fields that are set, as the dict the connector takes."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def _as_dict(cfg, what: str) -> dict:
    if cfg is None:
        return {}
    if isinstance(cfg, dict):
        return dict(cfg)
    if hasattr(cfg, "to_dict"):
        return cfg.to_dict()
    raise InvalidArgumentError(f"{what}: expected a dict or a config object, got {type(cfg).__name__}")


@dataclasses.dataclass
class StagePayload:
    request_id: str
    kind: str  # embedding | latent | checkpoint | feature | image | video
    tensor: Any  # Any DLPack tensor (torch, numpy, CuPy, JAX), contiguous, CPU or device.
    chunk_dim: Optional[int] = None
    num_chunks: int = 1
    lease: str = "delete_on_consume"  # | "ttl:SECONDS" | "cache" | "pinned"
    progressive: bool = False  # Chunks published one by one with handle.mark_ready(i).
    bound_consumer: Optional[str] = None  # auto mode: the consumer's endpoint, if known.
    keep_buffer: bool = True  # auto mode: the producer keeps the tensor until release.


class StageHandle:
    """The producer's view of one published payload."""

    def __init__(self, core, tensor):
        self._core = core
        self._tensor = tensor  # Keeps the published memory alive.

    @translated
    def descriptor(self) -> bytes:
        """Small bytes for a queue message; pass to consume() / release()."""
        return self._core.descriptor()

    @translated
    def descriptor_json(self) -> str:
        """descriptor() as JSON, for logs and debugging."""
        return self._core.descriptor_json()

    @property
    def mode(self) -> str:
        """How the payload travels: "p2p" or "store"."""
        return self._core.mode

    @translated
    def mark_ready(self, i: int) -> None:
        """Progressive payloads: chunk i holds its final bytes now."""
        self._core.mark_ready(int(i))

    @translated
    def wait(self, timeout: Optional[float] = None) -> None:
        """Until every chunk is published (store: in the store)."""
        self._core.wait(_FOREVER if timeout is None else float(timeout))

    def released(self) -> bool:
        """p2p: the consumer released the payload; store: it is in the store."""
        return self._core.released()

    @translated
    def wait_released(self, timeout: Optional[float] = None) -> None:
        """Returns once the consumer released the payload;
        DeadlineExceededError after `timeout` seconds."""
        self._core.wait_released(_FOREVER if timeout is None else float(timeout))

    def on_complete(self, cb: Callable[[Optional[Exception]], None]) -> None:
        """cb(None) on success, cb(error) on failure; runs on a sluice thread."""

        def call(code: int, message: str) -> None:
            cb(None if code == 0 else from_status(_CODE_NAMES.get(code, "UNKNOWN"), message))

        self._core.on_complete(call)

    def on_released(self, cb: Callable[[], None]) -> None:
        """Calls `cb()` once the consumer released the payload (at once if it has)."""
        self._core.on_released(cb)


_CODE_NAMES = dict(enumerate([
    "OK", "CANCELLED", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION", "UNAVAILABLE", "DEADLINE_EXCEEDED", "DATA_LOSS", "PERMISSION_DENIED",
    "UNIMPLEMENTED", "INTERNAL", "UNAUTHENTICATED"]))

Descriptor = Union[StageHandle, bytes, str]


def _descriptor_bytes(d: Descriptor) -> bytes:
    if isinstance(d, StageHandle):
        return d.descriptor()
    if isinstance(d, (bytes, bytearray, memoryview)):
        return bytes(d)
    if isinstance(d, str):
        return descriptor_from_json(d)
    raise InvalidArgumentError(f"descriptor: expected bytes, JSON text or a StageHandle, "
                               f"got {type(d).__name__}")


@translated
def descriptor_to_json(d: bytes) -> str:
    """A descriptor's bytes as JSON; InvalidArgumentError on malformed bytes."""
    return _sluice.descriptor_to_json(bytes(d))


@translated
def descriptor_from_json(text: str) -> bytes:
    """The descriptor bytes descriptor_to_json printed; InvalidArgumentError on bad JSON."""
    return _sluice.descriptor_from_json(text)


class DiffusionConnector:
    """Publishes and consumes stage payloads; see the module docstring."""

    @translated
    def __init__(self, role: str, transfer_mode: str = "auto",
                 store_config: Union[dict, StoreConfig, None] = None,
                 te_config: Union[dict, TransferEngineConfig, None] = None,
                 store_threads: int = 4, consume_timeout: float = 60.0,
                 cluster_token_file: Optional[str] = None, tls_cert_file: Optional[str] = None,
                 tls_key_file: Optional[str] = None, tls_ca_file: Optional[str] = None,
                 role_credential_file: Optional[str] = None):
        """The cluster credential and TLS files are those of the roles'
        --cluster-token (or --role-credential, a "client" credential from
        `sluice token derive`)/--tls-*; unset ones come from
        SLUICE_CLUSTER_TOKEN_FILE (SLUICE_ROLE_CREDENTIAL_FILE) and
        SLUICE_TLS_{CERT,KEY,CA}_FILE. The credential sets the engine's
        secret (unless te_config gives one) and the store client's."""
        if not isinstance(role, str):
            raise InvalidArgumentError("role must be a string (encode | denoise | decode | ...)")
        self._core = _sluice.Connector(role, transfer_mode, _as_dict(store_config, "store_config"),
                                       _as_dict(te_config, "te_config"), int(store_threads),
                                       float(consume_timeout),
                                       security_files(cluster_token_file, tls_cert_file,
                                                      tls_key_file, tls_ca_file,
                                                      role_credential_file))

    @property
    def endpoint(self) -> str:
        """This connector's engine endpoint (what a producer's bound_consumer names)."""
        return self._core.endpoint

    @property
    def role(self) -> str:
        """The stage role the connector was made for ("encode", "denoise", ...)."""
        return self._core.role

    @property
    def bytes_copied_outside_transfers(self) -> int:
        """Bytes this connector copied itself rather than the engine
        moving them (0 on zero-copy paths)."""
        return self._core.bytes_copied_outside_transfers

    @translated
    def publish(self, payload: StagePayload) -> StageHandle:
        """Starts moving the payload and returns at once."""
        if not isinstance(payload, StagePayload):
            raise InvalidArgumentError("publish() takes a StagePayload")
        ptr, dtype, shape, memory, device = describe(payload.tensor, "payload tensor")
        core = self._core.publish(
            str(payload.request_id), str(payload.kind), ptr, dtype, shape, memory, device,
            -1 if payload.chunk_dim is None else int(payload.chunk_dim), int(payload.num_chunks),
            str(payload.lease), bool(payload.progressive), payload.bound_consumer or "",
            bool(payload.keep_buffer))
        return StageHandle(core, payload.tensor)

    def consume(self, descriptor: Descriptor, dst) -> Iterator[Any]:
        """Yields views of dst (same type and device as dst), one per chunk, in
        order, each once its bytes have landed. dst must match the payload's
        shape and dtype; it may be on another device than the producer's."""
        d = _descriptor_bytes(descriptor)
        ptr, dtype, shape, memory, device = describe(dst, "dst", writable=True)
        stream = translated(self._core.consume)(d, ptr, dtype, shape, memory, device)
        chunk_dim = _sluice_chunk_dim(d)
        return self._chunks(stream, dst, chunk_dim)

    def _chunks(self, stream, dst, chunk_dim: int):
        try:
            nxt = translated(stream.next)
            while True:
                c = nxt()
                if c is None:
                    return
                _, start, length = c
                yield _chunk_view(dst, chunk_dim, start, length)
        finally:
            stream.close()

    @translated
    def consume_in_place(self, descriptor: Descriptor, framework: str = "numpy"):
        """The payload itself, copied nowhere, as a read-only numpy array
        (framework="numpy") or a torch tensor (framework="torch"; torch has no
        read-only tensors: never write it). p2p: the producer's tensor mapped
        into this process, for a complete payload a producer on this host
        published from a tensor `empty()` allocated; its bytes are the
        payload's until release(). store: the store node's memory, for a
        payload in one object (whole, or chunked along its outermost
        non-trivial dimension) on a node on this host, under a read lease
        that ends when the returned tensor and its views are freed (drop them
        within the master's read lease timeout, 60 s by default). Otherwise
        FailedPreconditionError says why (use consume)."""
        if framework not in ("numpy", "torch"):
            raise InvalidArgumentError(f"framework must be 'numpy' or 'torch', got {framework!r}")
        mem = self._core.consume_in_place(_descriptor_bytes(descriptor))
        shape = list(mem.shape)
        if framework == "torch":
            import torch
            import warnings

            dtype = getattr(torch, _TORCH_BY_NAME[mem.dtype])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "buffer is not writable": it is not meant to be.
                return torch.frombuffer(mem, dtype=dtype).view(shape)
        import numpy as np

        name = _NUMPY_BY_NAME.get(mem.dtype)
        if name is None:
            raise InvalidArgumentError(f"numpy has no {mem.dtype}; use framework='torch'")
        return np.frombuffer(mem, dtype=np.dtype(name)).reshape(shape)

    @translated
    def warm(self) -> None:
        """Opens the store connections the first publish or consume would open
        (the master, every store node, their shared memory mapped when on this
        host). Call it before a worker takes traffic; without a store it does
        nothing. Raises UnavailableError / DeadlineExceededError when the store
        cannot be reached; the connector stays usable."""
        self._core.warm()

    @translated
    def release(self, descriptor: Descriptor) -> None:
        """Ends the consumer's lease (store: deletes delete-on-consume chunks;
        p2p: tells the producer its buffer is free)."""
        self._core.release(_descriptor_bytes(descriptor))

    @translated
    def empty(self, shape, dtype, device=None):
        """A zeroed, contiguous tensor to publish from or consume into.
        device None / "cpu": memory sluice allocated (memfd-backed,
        pre-faulted, registered); a p2p consumer on the same host maps it and
        reads it with one memcpy, several times faster than reading ordinary
        memory. The memory lives as long as the returned tensor (and any view
        of it), even past close(). "cuda[:N]": a torch tensor on that GPU
        (`dtype` a torch dtype). "sim[:N]": a SimTensor on sluice's simulated
        device. `dtype` is a torch dtype (gives a torch tensor) or a numpy
        dtype (gives a numpy array)."""
        try:
            shape = [int(d) for d in shape]
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"empty: shape must be a sequence of ints, got {shape!r}")
        if dtype is None:
            raise InvalidArgumentError("empty: dtype is required (a numpy or torch dtype)")
        kind, index = parse_device(device)
        is_torch = str(dtype).startswith("torch.")
        if kind == "cuda":
            if not is_torch:
                raise InvalidArgumentError(f"empty: device cuda:{index} needs a torch dtype, "
                                           f"got {dtype!r} (numpy has no CUDA arrays)")
            import torch

            return torch.zeros(shape, dtype=dtype, device=f"cuda:{index}")
        if is_torch:
            name = _TORCH_DTYPES.get(str(dtype))
        else:
            import numpy as np

            try:
                name = _NUMPY_DTYPES.get(np.dtype(dtype).name)
            except TypeError:
                raise InvalidArgumentError(f"empty: unsupported dtype {dtype!r} "
                                           "(a numpy or torch dtype)")
        if name is None:
            raise InvalidArgumentError(f"empty: unsupported dtype {dtype}")
        if kind == "sim":
            return SimTensor.empty(shape, name, index)
        mem = self._core.allocate(name, shape)
        if is_torch:
            import torch

            return torch.frombuffer(mem, dtype=dtype).view(shape)
        import numpy as np

        return np.frombuffer(mem, dtype=np.dtype(dtype)).reshape(shape)

    def forget(self, tensor) -> None:
        """Drops the cached registration of a tensor's memory before it is freed."""
        ptr = describe(tensor, "tensor")[0]
        self._core.forget(ptr)

    def close(self) -> None:
        """Releases the connector's engine and store client. Idempotent."""
        self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _sluice_chunk_dim(d: bytes) -> int:
    import json

    return int(json.loads(descriptor_to_json(d)).get("chunk_dim", -1))
