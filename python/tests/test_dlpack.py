"""Tensors through DLPack: device tensors (sluice's sim device, so it runs
without a GPU) at either end in every mode, torch and numpy on the CPU, and
clear errors for what cannot be moved."""

import ctypes

import numpy as np
import pytest
import torch

import sluice
from sluice.diffusion import DiffusionConnector, SimTensor, StagePayload

SHAPE = (1, 4, 16, 10, 12)


@pytest.fixture(scope="module")
def pair(store):
    cfg = {"store_config": {"master": store.endpoint}, "te_config": {"device": "sim"},
           "consume_timeout": 20.0}
    prod = DiffusionConnector(role="denoise", **cfg)
    cons = DiffusionConnector(role="decode", **cfg)
    yield prod, cons
    prod.close()
    cons.close()


def pattern():
    return (np.arange(np.prod(SHAPE), dtype=np.int64) * 131 % 251).astype(np.float32).reshape(SHAPE)


def host_bytes(t) -> bytes:
    if isinstance(t, SimTensor):
        return t.tobytes()
    if isinstance(t, torch.Tensor):
        return t.numpy().tobytes()
    return t.tobytes()


@pytest.mark.parametrize("ends", ["sim->sim", "sim->numpy", "torch->sim"])
@pytest.mark.parametrize("dim,chunks", [(-1, 1), (2, 8)])
@pytest.mark.parametrize("mode", ["p2p", "store"])
def test_device_tensors_move_in_every_mode_byte_exact(pair, mode, dim, chunks, ends):
    # Before DLPack, the Python connector refused every tensor not on the CPU
    # ("only CPU tensors are supported").
    prod, cons = pair
    src_kind, dst_kind = ends.split("->")
    want = pattern()
    if src_kind == "sim":
        src = prod.empty(SHAPE, np.float32, device="sim:0")
        assert isinstance(src, SimTensor) and src.device == "sim:0"
        src.copy_from(want)
    else:
        src = torch.from_numpy(want.copy())
    dst = (cons.empty(SHAPE, np.float32, device="sim:1") if dst_kind == "sim"
           else np.zeros(SHAPE, dtype=np.float32))
    h = prod.publish(StagePayload(request_id=f"{mode}-{dim}-{ends}", kind="latent", tensor=src,
                                  chunk_dim=None if dim < 0 else dim, num_chunks=chunks,
                                  bound_consumer=cons.endpoint if mode == "p2p" else None))
    assert h.mode == mode
    views = list(cons.consume(h.descriptor(), dst=dst))
    assert len(views) == chunks
    for i, v in enumerate(views):
        assert type(v) is type(dst), "chunks come back as the consumer's tensor type"
        if dst_kind == "sim":
            assert v.device == "sim:1", "and on the consumer's device"
        if chunks > 1:
            assert v.shape[dim] == SHAPE[dim] // chunks
    assert host_bytes(dst) == want.tobytes()
    cons.release(h)
    h.wait_released(10)
    cons.forget(dst)


def test_cpu_torch_and_numpy_still_move_in_place(pair):
    prod, cons = pair
    src = torch.arange(2 * 3 * 8, dtype=torch.bfloat16).reshape(2, 3, 8)
    dst = torch.zeros((2, 3, 8), dtype=torch.bfloat16)
    h = prod.publish(StagePayload(request_id="bf16", kind="latent", tensor=src, chunk_dim=2,
                                  num_chunks=4, bound_consumer=cons.endpoint))
    for i, v in enumerate(cons.consume(h, dst=dst)):
        assert v.data_ptr() == dst.narrow(2, 2 * i, 2).data_ptr(), "views share dst's memory"
    assert torch.equal(dst, src)
    cons.release(h)
    flags = np.array([True, False, True, True])  # DLPack 0.6 has no bool: moved as bytes.
    out = np.zeros(4, dtype=bool)
    h = prod.publish(StagePayload(request_id="bool", kind="latent", tensor=flags,
                                  bound_consumer=cons.endpoint))
    list(cons.consume(h, dst=out))
    assert out.tolist() == flags.tolist()
    cons.release(h)
    ro = np.arange(12, dtype=np.int32)
    ro.setflags(write=False)  # A read-only source is fine (only read).
    back = np.zeros(12, dtype=np.int32)
    h = prod.publish(StagePayload(request_id="ro", kind="latent", tensor=ro,
                                  bound_consumer=cons.endpoint))
    list(cons.consume(h, dst=back))
    assert back.tolist() == ro.tolist()
    cons.release(h)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class ForeignTensor:
    """A DLPack producer on a device sluice does not move (e.g. ROCm)."""

    def __init__(self, device_type, device_id=0):
        self._shape = (ctypes.c_int64 * 1)(16)
        self._managed = _DLManaged()
        t = self._managed.dl_tensor
        t.data, t.device, t.ndim = 4096, _DLDevice(device_type, device_id), 1
        t.code, t.bits, t.lanes = 2, 32, 1
        t.shape = self._shape
        self._device = (device_type, device_id)

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), b"dltensor", None)


def test_what_cannot_be_moved_is_named(pair, store):
    prod, cons = pair
    bad = StagePayload(request_id="x", kind="latent", tensor=ForeignTensor(10, 1))
    with pytest.raises(sluice.InvalidArgumentError, match="rocm:1 are not supported"):
        prod.publish(bad)
    with pytest.raises(sluice.InvalidArgumentError, match="expected a tensor implementing "
                                                          "__dlpack__"):
        prod.publish(StagePayload(request_id="x", kind="latent", tensor=[1, 2, 3]))
    with pytest.raises(sluice.InvalidArgumentError, match="unsupported dtype"):
        prod.publish(StagePayload(request_id="x", kind="latent",
                                  tensor=np.zeros(4, dtype=np.complex64)))
    with pytest.raises(sluice.InvalidArgumentError, match="not contiguous"):
        prod.publish(StagePayload(request_id="x", kind="latent",
                                  tensor=np.zeros((4, 6), dtype=np.float32).T))
    with pytest.raises(sluice.InvalidArgumentError, match="meta"):
        prod.publish(StagePayload(request_id="x", kind="latent",
                                  tensor=torch.zeros(3, device="meta")))
    with pytest.raises(sluice.InvalidArgumentError, match="'rocm:0' is not supported"):
        prod.empty((4,), np.float32, device="rocm:0")
    with pytest.raises(sluice.InvalidArgumentError, match="needs a torch dtype"):
        prod.empty((4,), np.float32, device="cuda:0")
    with pytest.raises(sluice.InvalidArgumentError, match="config.device"):
        DiffusionConnector(role="decode", te_config={"device": "tpu"})
    # A device tensor on a connector without a device backend.
    plain = DiffusionConnector(role="encode", store_config={"master": store.endpoint})
    with pytest.raises(sluice.UnimplementedError, match="engine.device"):
        plain.publish(StagePayload(request_id="x", kind="latent",
                                   tensor=SimTensor.empty((16,), "f32")))
    plain.close()
    # A device payload is not readable in place; consume() it.
    src = prod.empty((16,), np.float32, device="sim:0")
    h = prod.publish(StagePayload(request_id="inplace", kind="latent", tensor=src,
                                  bound_consumer=cons.endpoint))
    with pytest.raises(sluice.FailedPreconditionError, match="device memory"):
        cons.consume_in_place(h)
    cons.release(h)
