"""sluice.TransferEngine and sluice.Store on DLPack tensors: host and sim
device memory, notifies after writes, leases, and typed errors."""

import time

import numpy as np
import pytest
import torch

import sluice
from sluice import SimTensor, Store, TransferEngine


def test_engines_move_host_and_device_memory_and_notify_after_writes():
    with TransferEngine(device="sim") as a, TransferEngine() as b:
        far = SimTensor.empty((64, 1024), "f32", device=1)
        key = a.register(far, access="rw")
        src = np.arange(64 * 1024, dtype=np.float32).reshape(64, 1024)
        back = np.zeros_like(src)
        b.register(src, access="local")
        b.register(back, access="local")
        seg = b.open_segment(a.endpoint)
        (region,) = [r for r in b.regions(seg) if r["key"] == key]
        assert region["memory"] == "device" and region["device"] == 1
        assert region["length"] == src.nbytes and region["access"] == "rw"
        # Two ops in one batch: the halves to two offsets.
        b.batch_write(seg, [(src[:32], key, 0), (src[32:], key, src.nbytes // 2)])
        b.notify(seg, b"written")
        sender, data = a.poll_notify(timeout=10)
        assert (sender, data) == (b.endpoint, b"written")
        assert far.tobytes() == src.tobytes(), "the bytes were in place before the notify"
        b.batch_read(seg, [(back, key, 0)])
        assert np.array_equal(back, src)
        assert a.poll_notify(timeout=0) is None
        assert sum(r + w for r, w in b.counters().values()) >= 2 * src.nbytes


def test_engine_input_is_checked():
    with TransferEngine() as a, TransferEngine() as b:
        t = torch.zeros(256, dtype=torch.uint8)
        key = a.register(t)
        seg = b.open_segment(a.endpoint)
        with pytest.raises(sluice.InvalidArgumentError, match="access must be"):
            a.register(torch.zeros(8), access="rwx")
        with pytest.raises(sluice.InvalidArgumentError, match="expected \\(tensor"):
            b.batch_read(seg, [t])
        with pytest.raises(sluice.InvalidArgumentError):  # Not registered with b.
            b.batch_read(seg, [(torch.zeros(16, dtype=torch.uint8), key, 0)])
        mine = b.register(np.zeros(300, dtype=np.uint8))
        assert mine > 0
        with pytest.raises(sluice.InvalidArgumentError):  # Past the region's end.
            b.batch_read(seg, [(np.zeros(300, dtype=np.uint8), key, 0)])
        with pytest.raises(sluice.UnimplementedError, match="EngineConfig::device"):
            a.register(SimTensor.empty((16,), "u8"))
        with pytest.raises(sluice.InvalidArgumentError, match="config.device"):
            TransferEngine(device="tpu")
        with pytest.raises(sluice.InvalidArgumentError):
            b.open_segment("not an endpoint")
    with pytest.raises(sluice.FailedPreconditionError, match="closed"):
        a.open_segment("127.0.0.1:1")
    with pytest.raises(sluice.FailedPreconditionError, match="closed"):
        a.endpoint


def test_store_puts_and_gets_bytes_host_and_device_tensors(store):
    with Store(store.endpoint, device="sim") as s:
        s.put("py/bytes", b"hello sluice", lease="ttl:60")
        assert s.get("py/bytes") == b"hello sluice"
        assert s.exists("py/bytes")
        s.remove("py/bytes")
        assert not s.exists("py/bytes")

        host = np.arange(100_000, dtype=np.int32)
        s.put("py/host", host)
        dev = SimTensor.empty((100_000,), "i32", device=0)
        assert s.get_into("py/host", dev) == host.nbytes
        assert dev.tobytes() == host.tobytes()

        # Device memory in, read back into host memory: one object.
        s.put("py/dev", dev, lease="soft_pin")
        out = np.zeros_like(host)
        assert s.get_into("py/dev", out) == host.nbytes
        assert np.array_equal(out, host)

        s.put("py/once", b"x" * 1000, lease="delete_on_consume")
        assert s.get("py/once") == b"x" * 1000
        deadline = time.time() + 5
        while s.exists("py/once") and time.time() < deadline:
            time.sleep(0.02)
        assert not s.exists("py/once"), "a delete-on-consume object goes after its read"

        with pytest.raises(sluice.NotFoundError):
            s.get("py/missing")
        with pytest.raises(sluice.DeadlineExceededError):
            s.wait_for("py/missing", timeout=0.2)
        with pytest.raises(sluice.InvalidArgumentError, match="lease must be"):
            s.put("py/bad", b"x", lease="forever")
        with pytest.raises(sluice.InvalidArgumentError, match="replicas"):
            s.put("py/bad", b"x", replicas=0)
        small = np.zeros(10, dtype=np.int32)
        with pytest.raises(sluice.InvalidArgumentError):  # Smaller than the object.
            s.get_into("py/host", small)
        s.forget(host)
        s.forget(out)
        s.remove("py/host")
        s.remove("py/dev")
    with pytest.raises(sluice.InvalidArgumentError, match="master"):
        Store("")
