"""sluice.TransferEngine and sluice.Store: the transfer engine and the store
client on DLPack tensors, for code that moves bytes itself (as Mooncake's
Python users do) rather than through the stage connector.

    eng = TransferEngine(device="sim")          # or "cuda"; None: host only
    key = eng.register(buf, access="rw")        # any contiguous DLPack tensor
    seg = eng.open_segment(peer_endpoint)
    eng.batch_write(seg, [(src, peer_key, 0)])  # each op moves the whole local tensor
    eng.notify(seg, b"ready")                   # lands after the writes before it

    store = Store(master="127.0.0.1:7100")
    store.put("k", tensor, lease="ttl:60")      # zero-copy from the tensor's memory
    store.get_into("k", dst)                    # into host or device memory
"""

import math
from typing import List, Optional, Sequence, Tuple

from . import _sluice
from ._security import security_files
from .errors import InvalidArgumentError, translated
from .tensors import ITEMSIZE, describe

__all__ = ["TransferEngine", "Store"]

_FOREVER = 1e7


def _nbytes(t, what: str, writable: bool = False):
    ptr, dtype, shape, memory, device = describe(t, what, writable)
    return ptr, math.prod(shape) * ITEMSIZE[dtype], memory, device


def _engine_config(listen, transports, device, secret) -> dict:
    cfg = {"listen": listen}
    if transports is not None:
        cfg["transports"] = list(transports)
    if device is not None:
        cfg["device"] = str(device)
    if secret is not None:
        cfg["secret"] = secret
    return cfg


class TransferEngine:
    """One transfer engine: registered memory, peer segments, batches of
    reads and writes, and notifies. `device` ("cuda" or "sim") lets it move
    device tensors; the cluster credential (cluster_token_file or
    SLUICE_CLUSTER_TOKEN_FILE, or a role credential: role_credential_file
    or SLUICE_ROLE_CREDENTIAL_FILE) sets its handshake secret."""

    @translated
    def __init__(self, listen: str = "127.0.0.1:0", transports: Optional[Sequence[str]] = None,
                 device: Optional[str] = None, secret: Optional[str] = None,
                 cluster_token_file: Optional[str] = None,
                 role_credential_file: Optional[str] = None):
        self._core = _sluice.Engine(_engine_config(listen, transports, device, secret),
                                    security_files(cluster_token_file, None, None, None,
                                                   role_credential_file))
        self._keep = {}  # Region key -> the tensor registered (kept alive).

    @property
    def endpoint(self) -> str:
        """"host:port" that peers open."""
        return translated(lambda: self._core.endpoint)()

    @translated
    def register(self, tensor, access: str = "rw") -> int:
        """Registers a contiguous tensor's memory (host or device) and returns
        its region key. access: "local" (this engine's ops only), "read",
        "write" or "rw" (what peers may do). The engine keeps a reference to
        the tensor until unregister()."""
        ptr, n, memory, device = _nbytes(tensor, "register")
        key = self._core.register_memory(ptr, n, memory, device, str(access))
        self._keep[key] = tensor
        return key

    @translated
    def unregister(self, key: int) -> None:
        """Fails (FailedPreconditionError) while an op still uses the region."""
        self._core.unregister(int(key))
        self._keep.pop(int(key), None)

    @translated
    def open_segment(self, endpoint: str) -> int:
        """Connects to a peer engine (cached) and returns its segment id."""
        return self._core.open_segment(str(endpoint))

    @translated
    def regions(self, segment: int) -> List[dict]:
        """The peer's region table as last pushed: key, length, memory, device, access."""
        return self._core.regions(int(segment))

    def batch_read(self, segment: int, ops: Sequence[Tuple[object, int, int]],
                   timeout: Optional[float] = None) -> None:
        """Reads into each (dst tensor, remote key, remote offset): the whole
        of dst, one batch; returns once every op landed. dst must be inside
        memory registered with this engine."""
        self._transfer("read", segment, ops, timeout)

    def batch_write(self, segment: int, ops: Sequence[Tuple[object, int, int]],
                    timeout: Optional[float] = None) -> None:
        """Writes each (src tensor, remote key, remote offset), as batch_read."""
        self._transfer("write", segment, ops, timeout)

    @translated
    def _transfer(self, kind, segment, ops, timeout):
        core_ops = []
        for i, op in enumerate(ops):
            try:
                tensor, key, offset = op
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"op {i}: expected (tensor, remote_key, remote_offset)")
            ptr, n, _, _ = _nbytes(tensor, f"op {i}", writable=kind == "read")
            core_ops.append((kind, ptr, n, int(key), int(offset)))
        self._core.transfer(int(segment), core_ops, _FOREVER if timeout is None else float(timeout))

    @translated
    def notify(self, segment: int, data: bytes) -> None:
        """Sends a small message; it arrives after every write this engine
        completed to that peer before the call."""
        self._core.notify(int(segment), bytes(data))

    @translated
    def poll_notify(self, timeout: float = 0.0):
        """The next received notify as (sender endpoint, bytes), waiting up to
        `timeout` seconds; None when none came. The oldest are dropped past
        4096 waiting."""
        return self._core.poll_notify(float(timeout))

    def counters(self) -> dict:
        """Bytes each transport carried: {name: (read, written)}."""
        return self._core.counters()

    def close(self) -> None:
        """Stops the engine; registrations and segments end with it. Idempotent."""
        self._core.close()
        self._keep.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Store:
    """A client of the sluice store on an engine of its own. Leases:
    "cache" (evictable), "soft_pin" (evicted last), "delete_on_consume"
    (gone after one read), "ttl:SECONDS"."""

    @translated
    def __init__(self, master: str, listen: str = "127.0.0.1:0",
                 transports: Optional[Sequence[str]] = None, device: Optional[str] = None,
                 cluster_token_file: Optional[str] = None,
                 role_credential_file: Optional[str] = None):
        if not isinstance(master, str) or not master:
            raise InvalidArgumentError("master must be \"host:port\" of the store master")
        self._core = _sluice.Store(master, _engine_config(listen, transports, device, None),
                                   security_files(cluster_token_file, None, None, None,
                                                  role_credential_file))

    @translated
    def put(self, key: str, value, lease: str = "cache", replicas: int = 1) -> None:
        """Stores bytes (copied through the client's staging buffer) or a
        contiguous DLPack tensor (zero-copy from its memory, host or device;
        registered on first use: forget() it before freeing the memory)."""
        if isinstance(value, (bytes, bytearray, memoryview)):
            self._core.put_bytes(str(key), bytes(value), str(lease), int(replicas))
            return
        ptr, n, memory, device = _nbytes(value, "value")
        self._core.put_from(str(key), ptr, n, memory, device, str(lease), int(replicas))

    @translated
    def get(self, key: str) -> bytes:
        """The object's bytes (copied); NotFoundError when absent."""
        return self._core.get(str(key))

    @translated
    def get_into(self, key: str, dst) -> int:
        """Reads the object into a contiguous tensor (host or device) at least
        its size; returns the object's size."""
        ptr, n, memory, device = _nbytes(dst, "dst", writable=True)
        return self._core.get_into(str(key), ptr, n, memory, device)

    @translated
    def remove(self, key: str) -> None:
        """Deletes the object; NotFoundError when absent (a retry after a
        success too), FailedPreconditionError while it is being written."""
        self._core.remove(str(key))

    @translated
    def exists(self, key: str) -> bool:
        """Whether the object is committed now."""
        return self._core.exists(str(key))

    @translated
    def wait_for(self, key: str, timeout: Optional[float] = None) -> None:
        """Returns once `key` is committed; DeadlineExceededError after `timeout`."""
        self._core.wait_for(str(key), _FOREVER if timeout is None else float(timeout))

    def forget(self, tensor) -> None:
        """Drops the registration put() or get_into() made of a tensor's memory."""
        self._core.forget(describe(tensor, "tensor")[0])

    def close(self) -> None:
        """Closes the client and its engine. Idempotent."""
        self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
