"""Tensors as sluice reads them: through DLPack, from any framework.

Any object with `__dlpack__` and `__dlpack_device__` (torch, numpy >= 1.22,
CuPy, JAX) is read in place from its DLPack capsule: CPU memory, CUDA device
memory (the connector's engine needs te_config={"device": "cuda"}), or
sluice's simulated device (`SimTensor`, te_config={"device": "sim"}), which
lets every device path run on a machine without a GPU.

Before sluice reads or writes a CUDA torch tensor it waits for the tensor's
current stream, so work queued on it is done; other frameworks' CUDA work
must be complete when the tensor is handed over.
"""

import math
from typing import List, Optional, Sequence, Tuple

from . import _sluice
from .errors import InvalidArgumentError, translated

__all__ = ["SimTensor", "describe", "parse_device"]

_DL_CUDA = 2
_DL_EXT_DEV = 12  # What sluice's sim devices export themselves as.

# numpy dtype name -> sluice dtype name (numpy has no bf16).
NUMPY_DTYPES = {"bool": "bool", "uint8": "u8", "int8": "i8", "int16": "i16", "int32": "i32",
                "int64": "i64", "float16": "f16", "float32": "f32", "float64": "f64"}

ITEMSIZE = {"bool": 1, "u8": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "f16": 2, "bf16": 2,
             "f32": 4, "f64": 8}


def parse_device(device) -> Tuple[str, int]:
    """("cpu", -1), ("cuda", N) or ("sim", N) for None, "cpu", "cuda[:N]",
    "sim[:N]" (or a torch.device); InvalidArgumentError otherwise."""
    if device is None:
        return "cpu", -1
    text = str(device)
    kind, _, index = text.partition(":")
    if kind == "cpu" and not index:
        return "cpu", -1
    if kind in ("cuda", "sim"):
        if not index:
            return kind, 0
        if index.isdigit() and int(index) <= 1023:
            return kind, int(index)
    raise InvalidArgumentError(f"device {text!r} is not supported (cpu, cuda[:N], or sluice's "
                               "sim[:N])")


def _wait_for_framework(t) -> None:
    """A CUDA torch tensor: the work queued on its current stream is done."""
    if hasattr(t, "data_ptr") and getattr(getattr(t, "device", None), "type", "") == "cuda":
        import torch

        torch.cuda.current_stream(t.device).synchronize()


def _is_bool(t) -> bool:
    return str(getattr(t, "dtype", "")) in ("bool", "torch.bool")


def _as_u8(t):
    """The same bytes as uint8 (DLPack 0.6 frameworks export no bool)."""
    if str(t.dtype).startswith("torch."):
        import torch

        return t.view(torch.uint8)
    import numpy as np

    return t.view(np.uint8)


def describe(t, what: str, writable: bool = False):
    """(pointer, dtype, shape, memory, device) of a contiguous tensor read
    through DLPack; memory is "host" or "device". Raises
    InvalidArgumentError naming `what` and the reason (no __dlpack__, an
    unsupported device, dtype or layout, a read-only destination)."""
    if not (hasattr(t, "__dlpack__") and hasattr(t, "__dlpack_device__")):
        raise InvalidArgumentError(f"{what}: expected a tensor implementing __dlpack__ (torch, "
                                   f"numpy >= 1.22, CuPy, JAX), got {type(t).__name__}")
    dtype_name = None
    src = t
    if _is_bool(t):
        src, dtype_name = _as_u8(t), "bool"
    try:
        device_type, _ = src.__dlpack_device__()
    except (ValueError, RuntimeError, TypeError) as e:  # e.g. torch's meta tensors.
        raise InvalidArgumentError(f"{what}: {e}") from None
    if int(device_type) == _DL_CUDA:
        _wait_for_framework(t)
    try:
        capsule = src.__dlpack__()
    except BufferError as e:
        ai = getattr(t, "__array_interface__", None)
        read_only = ai is not None and ai.get("data", (0, False))[1]
        if writable and read_only:
            raise InvalidArgumentError(f"{what}: array is read-only") from None
        if not read_only:
            raise InvalidArgumentError(f"{what}: {e}") from None
        # numpy refuses to export read-only arrays (DLPack 0.6 cannot say
        # read-only); a source is only read, so take its array interface.
        return _from_array_interface(t, ai, what)
    except (ValueError, RuntimeError, TypeError) as e:
        raise InvalidArgumentError(f"{what}: {e}") from None
    ptr, dtype, shape, memory, device = translated(_sluice.dlpack_tensor)(capsule, what)
    return ptr, dtype_name or dtype, shape, memory, device


def _from_array_interface(t, ai, what: str):
    if not t.flags.c_contiguous:
        raise InvalidArgumentError(f"{what}: array is not contiguous (np.ascontiguousarray)")
    dtype = NUMPY_DTYPES.get(t.dtype.name)
    if dtype is None:
        raise InvalidArgumentError(f"{what}: unsupported dtype {t.dtype}")
    return ai["data"][0], dtype, list(t.shape), "host", -1


class SimTensor:
    """A tensor in sluice's simulated device memory: host memory that behaves
    like a device's (the CPU never touches it; bytes move only through the
    sim backend's copies). For connectors whose te_config has
    {"device": "sim"}: `conn.empty(shape, dtype, device="sim:0")` makes one.
    Exposes `__dlpack__` (device type ext_dev), `narrow` views, and
    `copy_from` / `numpy()` / `tobytes()` to fill and read it."""

    def __init__(self, mem, dtype: str, shape: Sequence[int], offset: int = 0,
                 strides: Optional[List[int]] = None):
        self._mem = mem
        self.dtype = dtype
        self.shape = tuple(int(d) for d in shape)
        self._offset = offset
        self._strides = list(strides) if strides is not None else _row_major(self.shape)

    @classmethod
    @translated
    def empty(cls, shape: Sequence[int], dtype: str, device: int = 0) -> "SimTensor":
        """A zeroed contiguous tensor of sluice dtype name `dtype` on sim device `device`."""
        nbytes = math.prod(shape) * ITEMSIZE[dtype]
        return cls(_sluice.SimMemory(int(device), max(nbytes, 1)), dtype, shape)

    @property
    def device(self) -> str:
        """The device it lives on, "sim:N"."""
        return f"sim:{self._mem.device}"

    @property
    def nbytes(self) -> int:
        """Bytes its elements take (the view's, not the memory's)."""
        return math.prod(self.shape) * ITEMSIZE[self.dtype]

    def is_contiguous(self) -> bool:
        """Whether its elements lie row-major with no gaps (size-1 dims ignored)."""
        want = _row_major(self.shape)
        return all(n == 1 or s == w for n, s, w in zip(self.shape, self._strides, want))

    def __dlpack__(self, stream=None):
        return translated(_sluice.sim_dlpack)(self._mem, self._offset, self.dtype,
                                              list(self.shape), list(self._strides))

    def __dlpack_device__(self):
        return (_DL_EXT_DEV, self._mem.device)

    def narrow(self, dim: int, start: int, length: int) -> "SimTensor":
        """The view [start, start + length) along `dim` (shares the memory)."""
        if not 0 <= dim < len(self.shape) or start < 0 or length < 0 or \
                start + length > self.shape[dim]:
            raise InvalidArgumentError(f"narrow({dim}, {start}, {length}) outside {self.shape}")
        shape = list(self.shape)
        shape[dim] = length
        offset = self._offset + start * self._strides[dim] * ITEMSIZE[self.dtype]
        return SimTensor(self._mem, self.dtype, shape, offset, self._strides)

    @translated
    def copy_from(self, data) -> None:
        """Writes a host buffer of exactly nbytes (bytes, a numpy array) in."""
        self._require_contiguous()
        view = memoryview(data).cast("B")
        if view.nbytes != self.nbytes:
            raise InvalidArgumentError(f"copy_from: {view.nbytes} bytes for a tensor of "
                                       f"{self.nbytes}")
        self._mem.write(self._offset, view)

    @translated
    def tobytes(self) -> bytes:
        """A host copy of its bytes; InvalidArgumentError on a non-contiguous view."""
        self._require_contiguous()
        return self._mem.read(self._offset, self.nbytes)

    def numpy(self):
        """A host copy as a numpy array (not for bf16, which numpy lacks)."""
        import numpy as np

        names = {v: k for k, v in NUMPY_DTYPES.items()}
        if self.dtype not in names:
            raise InvalidArgumentError(f"numpy has no {self.dtype}; use tobytes()")
        return np.frombuffer(self.tobytes(), dtype=names[self.dtype]).reshape(self.shape)

    def _require_contiguous(self) -> None:
        if not self.is_contiguous():
            raise InvalidArgumentError("a narrowed SimTensor view is not contiguous: copy the "
                                       "whole tensor")

    def __repr__(self) -> str:
        return f"SimTensor({self.dtype}{list(self.shape)}, device={self.device!r})"


def _row_major(shape: Sequence[int]) -> List[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return list(reversed(strides))
