"""The Python connector: producer and consumer in separate processes,
numpy and torch, every mode and chunking, typed errors, the RFC sketch."""

import threading
import time

import numpy as np
import pytest
import torch

import sluice
from sluice.diffusion import DiffusionConnector, StagePayload, descriptor_to_json

from producer import SHAPE, make


@pytest.fixture(scope="module")
def consumer(store):
    c = DiffusionConnector(role="decode", store_config={"master": store.endpoint},
                           consume_timeout=20.0)
    yield c
    c.close()


def empty_like(lib):
    if lib == "torch":
        return torch.zeros(SHAPE, dtype=torch.bfloat16)
    return np.zeros(SHAPE, dtype=np.float32)


def equal(a, b):
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else np.array_equal(a, b)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("dim,chunks", [(-1, 1), (0, 8), (2, 8)])
@pytest.mark.parametrize("mode", ["p2p", "store"])
def test_every_mode_and_chunking_is_byte_exact(store, consumer, producer, mode, lib, dim, chunks):
    p = producer(mode, lib, dim, chunks, store.endpoint)
    desc = bytes.fromhex(p.words[1])
    dst = empty_like(lib)
    views = list(consumer.consume(desc, dst=dst))
    assert len(views) == chunks
    for v in views:
        assert type(v) is type(dst), "chunks come back as the consumer's tensor type"
        if chunks > 1:
            assert v.shape[dim] == SHAPE[dim] // chunks
    assert equal(dst, make(lib))
    consumer.release(desc)
    consumer.forget(dst)


def test_views_share_the_destination_memory(store, consumer, producer):
    p = producer("p2p", "torch", 2, 4, store.endpoint, "--progressive-ms", "20")
    dst = empty_like("torch")
    for i, chunk in enumerate(consumer.consume(bytes.fromhex(p.words[1]), dst=dst)):
        chunk.fill_(i)  # Writing the view writes dst.
        assert torch.all(dst.narrow(2, i * 4, 4) == i)
    consumer.release(bytes.fromhex(p.words[1]))
    consumer.forget(dst)


def test_delete_on_consume_leaves_the_store_empty(store, consumer, producer):
    for lib in ("numpy", "torch"):
        p = producer("store", lib, 0, 8, store.endpoint)
        dst = empty_like(lib)
        for _ in consumer.consume(bytes.fromhex(p.words[1]), dst=dst):
            pass
        consumer.release(bytes.fromhex(p.words[1]))
        consumer.forget(dst)
    deadline = time.time() + 5
    while store.metric("sluice_store_objects") != 0 and time.time() < deadline:
        time.sleep(0.02)
    assert store.metric("sluice_store_objects") == 0


def test_producer_death_p2p_raises_instead_of_hanging(store, consumer, producer):
    p = producer("p2p", "numpy", 2, 8, store.endpoint, "--progressive-ms", "100000")
    dst = empty_like("numpy")
    chunks = consumer.consume(bytes.fromhex(p.words[1]), dst=dst)
    p.kill()
    start = time.time()
    with pytest.raises(sluice.SluiceError) as e:
        next(chunks)
    assert not isinstance(e.value, sluice.DeadlineExceededError), str(e.value)
    assert time.time() - start < 10
    consumer.forget(dst)


def test_store_mode_outlives_its_producer(store, consumer, producer):
    p = producer("store", "torch", 2, 8, store.endpoint)
    desc = bytes.fromhex(p.words[1])
    p.kill()
    dst = empty_like("torch")
    assert len(list(consumer.consume(desc, dst=dst))) == 8
    assert equal(dst, make("torch"))
    consumer.release(desc)
    consumer.forget(dst)


def test_the_gil_is_released_while_waiting_for_chunks(store, consumer, producer):
    p = producer("p2p", "numpy", 2, 4, store.endpoint, "--progressive-ms", "200")
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.time())
            time.sleep(0.01)

    t = threading.Thread(target=ticker)
    t.start()
    dst = empty_like("numpy")
    list(consumer.consume(bytes.fromhex(p.words[1]), dst=dst))
    stop.set()
    t.join()
    assert len(ticks) > 30, "another Python thread ran while consume() waited"
    consumer.release(bytes.fromhex(p.words[1]))
    consumer.forget(dst)


def test_bad_input_gets_typed_errors(store, consumer):
    prod = DiffusionConnector(role="denoise", transfer_mode="p2p")
    t = torch.ones((4, 6), dtype=torch.float32)
    with pytest.raises(sluice.InvalidArgumentError, match="not contiguous"):
        prod.publish(StagePayload(request_id="r", kind="latent", tensor=t.t()))
    with pytest.raises(sluice.InvalidArgumentError, match="payload kind"):
        prod.publish(StagePayload(request_id="r", kind="lantent", tensor=t))
    with pytest.raises(sluice.InvalidArgumentError, match="lease"):
        prod.publish(StagePayload(request_id="r", kind="latent", tensor=t, lease="forever"))
    with pytest.raises(ValueError):  # Typed errors are also the standard ones.
        prod.publish(StagePayload(request_id="r", kind="latent", tensor=t, chunk_dim=1,
                                  num_chunks=7))
    h = prod.publish(StagePayload(request_id="r", kind="latent", tensor=t))
    with pytest.raises(sluice.InvalidArgumentError, match=r"f32\[4,6\]"):
        next(consumer.consume(h, dst=torch.zeros((6, 4))))
    with pytest.raises(sluice.InvalidArgumentError, match="read-only"):
        ro = np.zeros((4, 6), dtype=np.float32)
        ro.setflags(write=False)
        next(consumer.consume(h, dst=ro))
    d = h.descriptor()
    with pytest.raises(sluice.InvalidArgumentError, match="truncated"):
        next(consumer.consume(d[:10], dst=torch.zeros((4, 6))))
    corrupt = bytearray(d)
    corrupt[-2] ^= 0xFF
    with pytest.raises(sluice.InvalidArgumentError, match="checksum"):
        consumer.release(bytes(corrupt))
    newer = bytearray(d)
    newer[4] = 9
    with pytest.raises(sluice.FailedPreconditionError, match="newer"):
        consumer.release(bytes(newer))
    with pytest.raises(sluice.InvalidArgumentError, match="unknown key 'lisen'"):
        DiffusionConnector(role="decode", te_config={"lisen": "127.0.0.1:0"})
    with pytest.raises(sluice.InvalidArgumentError, match="store mode needs"):
        DiffusionConnector(role="decode", transfer_mode="store")
    assert '"mode":"p2p"' in descriptor_to_json(d)
    assert h.descriptor_json() == descriptor_to_json(d)
    consumer.release(h)
    h.wait_released(5)
    prod.close()


def test_rfc_api_sketch_runs_as_written(store):
    # The RFC's sketch, with CPU tensors and a real store.
    req_id = "rfc-1"
    latents = torch.randn(1, 16, 21, 60, 104).to(torch.bfloat16)
    conn = DiffusionConnector(role="denoise",            # encode | denoise | decode
                              transfer_mode="auto",      # p2p | store | auto
                              store_config={"master": store.endpoint}, te_config=None)

    # producer (denoise worker): publish latents chunk-by-chunk
    handle = conn.publish(StagePayload(
        request_id=req_id, kind="latent",
        tensor=latents, chunk_dim=2, num_chunks=8,      # temporal chunking
        lease="delete_on_consume"))

    # consumer (decode worker): pulled from queue, fetch chunks as they land
    decoder = DiffusionConnector(role="decode", store_config={"master": store.endpoint})
    dst = torch.empty_like(latents, device="cpu")
    decoded = []
    for chunk in decoder.consume(handle, dst=dst):
        decoded.append(chunk.float().mean())   # vae.decode_chunk(chunk)
    assert len(decoded) == 8
    assert torch.equal(dst, latents)
    decoder.release(handle)
    handle.wait(10)
    assert handle.mode == "store"  # No bound consumer: auto chose the store.
    done = threading.Event()
    handle.on_complete(lambda err: done.set() if err is None else None)
    assert done.wait(5)
    assert decoder.bytes_copied_outside_transfers == 0
    decoder.close()
    conn.close()


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_empty_tensors_are_published_p2p_from_shared_memory(store, consumer, producer, lib):
    p = producer("p2p", lib, 2, 8, store.endpoint, "--shared")
    desc = bytes.fromhex(p.words[1])
    dst = consumer.empty(SHAPE, make(lib).dtype)  # A connector tensor as dst works too.
    assert type(dst) is type(make(lib))
    assert len(list(consumer.consume(desc, dst=dst))) == 8
    assert equal(dst, make(lib))
    consumer.release(desc)


def test_empty_gives_zeroed_writable_contiguous_tensors(store):
    conn = DiffusionConnector(role="encode")
    t = conn.empty((4, 3, 5), torch.bfloat16)
    assert t.dtype == torch.bfloat16 and tuple(t.shape) == (4, 3, 5) and t.is_contiguous()
    assert torch.count_nonzero(t) == 0
    a = conn.empty([2, 8], np.int32)
    assert a.dtype == np.int32 and a.shape == (2, 8) and a.flags.c_contiguous
    assert a.flags.writeable and not a.any()
    a[1, 7] = 9
    view = t[1]
    conn.close()
    del t
    view.fill_(2)  # The memory outlives the connector and the base tensor.
    assert float(view.float().sum()) == 30.0 and a[1, 7] == 9


def test_empty_rejects_bad_input(store):
    conn = DiffusionConnector(role="encode")
    with pytest.raises(sluice.InvalidArgumentError, match="dimension 1 is 0"):
        conn.empty((4, 0), np.float32)
    with pytest.raises(sluice.InvalidArgumentError, match="dimension 0 is -2"):
        conn.empty((-2,), torch.float32)
    with pytest.raises(sluice.InvalidArgumentError, match="rank"):
        conn.empty((), torch.float32)
    with pytest.raises(sluice.InvalidArgumentError, match="sequence of ints"):
        conn.empty("abc", np.float32)
    with pytest.raises(sluice.InvalidArgumentError, match="unsupported dtype"):
        conn.empty((4,), np.complex64)
    with pytest.raises(sluice.InvalidArgumentError, match="unsupported dtype"):
        conn.empty((4,), torch.complex64)
    with pytest.raises(sluice.InvalidArgumentError, match="unsupported dtype"):
        conn.empty((4,), "bogus")
    with pytest.raises(sluice.InvalidArgumentError, match="dtype is required"):
        conn.empty((4,), None)
    with pytest.raises(sluice.ResourceExhaustedError, match="available on this host"):
        conn.empty((1 << 50,), np.uint8)
    assert conn.empty((2,), np.uint8).shape == (2,)  # Still serving.
    conn.close()
    with pytest.raises(sluice.FailedPreconditionError, match="closed"):
        conn.empty((2,), np.uint8)
    with pytest.raises(sluice.FailedPreconditionError, match="closed"):
        conn.publish(StagePayload(request_id="r", kind="latent", tensor=np.zeros(4)))


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_consume_in_place_reads_the_producers_tensor_without_copying(store, consumer, producer,
                                                                     lib):
    p = producer("p2p", lib, -1, 1, store.endpoint, "--shared")
    desc = bytes.fromhex(p.words[1])
    t = consumer.consume_in_place(desc, framework=lib)
    assert type(t) is type(make(lib))
    assert tuple(t.shape) == SHAPE
    assert equal(t, make(lib))
    if lib == "numpy":
        assert not t.flags.writeable
    consumer.release(desc)


def test_consume_in_place_says_why_it_cannot(store, consumer, producer):
    plain = producer("p2p", "torch", -1, 1, store.endpoint)
    desc = bytes.fromhex(plain.words[1])
    with pytest.raises(sluice.FailedPreconditionError, match="not a shared allocation"):
        consumer.consume_in_place(desc, framework="torch")
    consumer.release(desc)
    shared = producer("p2p", "torch", -1, 1, store.endpoint, "--shared")
    desc = bytes.fromhex(shared.words[1])
    with pytest.raises(sluice.InvalidArgumentError, match="numpy has no bf16"):
        consumer.consume_in_place(desc)
    with pytest.raises(sluice.InvalidArgumentError, match="framework"):
        consumer.consume_in_place(desc, framework="jax")
    consumer.release(desc)


def test_consume_in_place_reads_a_store_payload_under_a_lease(store, consumer, producer):
    p = producer("store", "numpy", -1, 1, store.endpoint)
    desc = bytes.fromhex(p.words[1])
    t = consumer.consume_in_place(desc)
    assert equal(t, make("numpy")) and not t.flags.writeable
    held = store.metric("sluice_store_objects")
    assert held >= 1, "the view's lease keeps the payload"
    del t  # Ends the read: delete-on-consume counts it.
    deadline = time.time() + 5
    while store.metric("sluice_store_objects") != held - 1:
        assert time.time() < deadline, "the payload outlived its only read"
        time.sleep(0.02)
    consumer.release(desc)



def test_warm_opens_the_store_and_is_idempotent(store):
    c = DiffusionConnector(role="encode", store_config={"master": store.endpoint})
    try:
        c.warm()
        c.warm()
    finally:
        c.close()
    with pytest.raises(sluice.FailedPreconditionError):
        c.warm()  # After close().
