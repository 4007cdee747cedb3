"""sluice.cache: standard keys equal to C++'s (golden vectors of
docs/design/cache-keys.md and random fields through the C++ code), and the
single-flight cache on a store."""

import base64
import json
import random
import threading
import time
import urllib.request

import pytest

import sluice
from sluice import _sluice, cache
from sluice.cache import condition_key, checkpoint_key, feature_key, make_key

from conftest import SLUICE_BIN, Proc


def test_golden_vectors_of_the_specification():
    assert make_key("cond", {}) == (
        "cache/cond/d446a0ab6a8be2f8c08a0605868473b8d6671dfd5d1c970416954202e3d0dc00")
    assert make_key("demo", {"text": "a cat", "n": 7, "g": 4.5, "shape": [1, -2, 3],
                             "names": ["x", ""], "z": -0.0}) == (
        "cache/demo/94c68010521ed71d9a7a4bb5afaab39e98d036361d14225dae69d1d5a2010e76")
    params = {"max_length": 64, "dtype": "f32"}
    assert condition_key("sluice-reference-text", "1", "a red fox", params) == (
        "cache/cond/0cced3dffce1fdf5a404b3c35077b2c086a9522ca1e5915a8e7e94134ce08b23")
    assert condition_key("sluice-reference-text", "2", "a red fox", params) == (
        "cache/cond/f54017fdd5e9b162cd447b939f0da860102b3cdec8b679488cd570e2cdf5cd86")
    assert condition_key("sluice-reference-text", "1", "a red fox", params,
                         scope="tenant-a") == (
        "cache/cond/4e650743e42cd3084b910fade4088a0aea75f805cc697f39fbac94d2e183d52d")
    encoder = cache.ConditionEncoder("sluice-reference-text", "1", params, ["prompt"])
    assert encoder.keys_for('{"prompt": "a red fox", "cache_scope": "tenant-a"}') == [
        "cache/cond/4e650743e42cd3084b910fade4088a0aea75f805cc697f39fbac94d2e183d52d"]
    with pytest.raises(sluice.InvalidArgumentError, match="'scope' is a reserved"):
        condition_key("e", "1", "t", {"scope": "tenant-a"})
    assert checkpoint_key(model="sluice-reference", model_version="1", sampler="flow_euler",
                          seed=42, guidance=4.0, condition_keys=["cache/cond/aa", "cache/cond/bb"],
                          total_steps=12, step=6, shape=[16, 1, 8, 8], dtype="f32") == (
        "cache/ckpt/8b77463871813c2b278fdfbb7390e2053f17a2e6fe5434e96f2d9f7548801179")
    assert feature_key("sluice.dit", {"negative": "cache/cond/bb", "timestep": 3,
                                      "layer": 0}) == (
        "cache/feat/6c12ac3703377fa75ac55e8584e2648d972e20fe1aebf8c2f2f670b018771711")


def _typed(value):
    if isinstance(value, cache.ints):
        return "ints"
    if isinstance(value, cache.texts):
        return "texts"
    return {str: "text", int: "int", float: "float"}[type(value)]


def _random_value(rng):
    kind = rng.randrange(5)
    text = lambda: "".join(rng.choice("aé文\0 z") for _ in range(rng.randrange(6)))
    if kind == 0:
        return text()
    if kind == 1:
        return rng.randrange(-2**63, 2**63)
    if kind == 2:
        return rng.choice([0.0, -0.0, 1e-300, rng.uniform(-1e9, 1e9)])
    if kind == 3:
        return cache.ints(rng.randrange(-2**63, 2**63) for _ in range(rng.randrange(4)))
    return cache.texts(text() for _ in range(rng.randrange(4)))


def test_python_keys_equal_the_cpp_keys_on_the_same_inputs():
    rng = random.Random(7)
    for _ in range(300):
        names = rng.sample(["a", "b", "text", "x.y", "z_9", "model", "seed", "shape"],
                           rng.randrange(0, 6))
        fields = {n: _random_value(rng) for n in names}
        kind = rng.choice(["cond", "ckpt", "feat", "k_2"])
        cpp = _sluice.cache_make_key(kind, [(n, _typed(v), v) for n, v in fields.items()])
        assert make_key(kind, fields) == cpp, fields


def test_malformed_keys_are_refused_by_name():
    with pytest.raises(sluice.InvalidArgumentError, match="kind 'Cond'"):
        make_key("Cond", {})
    with pytest.raises(sluice.InvalidArgumentError, match="'g': floats must be finite"):
        make_key("k", {"g": float("nan")})
    with pytest.raises(sluice.InvalidArgumentError, match="empty list"):
        make_key("k", {"l": []})
    with pytest.raises(sluice.InvalidArgumentError, match="bool"):
        make_key("k", {"b": True})
    with pytest.raises(sluice.InvalidArgumentError, match="reserved"):
        condition_key("enc", "1", "t", {"text": "x"})
    with pytest.raises(sluice.InvalidArgumentError, match="step 12 must be in 1..11"):
        checkpoint_key(model="m", model_version="1", sampler="s", seed=1, guidance=1.0,
                       condition_keys=[], total_steps=12, step=12, shape=[1], dtype="f32")


def test_concurrent_misses_compute_once_and_errors_reach_the_caller(store):
    key = condition_key("py-encoder", "1", "a hot negative prompt")
    calls = []
    stores = [sluice.Store(store.endpoint) for _ in range(2)]
    try:
        caches = [cache.Cache(s) for s in stores]

        def compute():
            calls.append(1)
            time.sleep(0.3)
            return b"embedding"

        got = []
        threads = [threading.Thread(target=lambda c=c: got.append(c.get_or_compute(key, compute)))
                   for c in caches * 2]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == [b"embedding"] * 4 and len(calls) == 1
        stats = [c.stats() for c in caches]
        assert sum(s["computes"] for s in stats) == 1
        assert sum(s["single_flight_waits"] for s in stats) == 3
        assert caches[0].lookup(key) == b"embedding"
        assert caches[0].lookup(condition_key("py-encoder", "1", "absent")) is None

        def refuse():
            raise ValueError("the encoder refused this text")

        other = condition_key("py-encoder", "1", "refused")
        with pytest.raises(ValueError, match="refused this text"):
            caches[0].get_or_compute(other, refuse)
        # The failed compute released its claim: the next caller computes.
        assert caches[1].get_or_compute(other, lambda: bytearray(b"ok")) == b"ok"
        with pytest.raises(sluice.InvalidArgumentError, match="bytes-like"):
            caches[0].get_or_compute(condition_key("py-encoder", "1", "n"), lambda: 5)
        strided = memoryview(bytes(range(16))).cast("B", (4, 4))[::2]
        with pytest.raises(sluice.InvalidArgumentError, match="contiguous"):
            caches[0].get_or_compute(condition_key("py-encoder", "1", "s"), lambda: strided)
        with pytest.raises(sluice.InvalidArgumentError, match="lease must be"):
            cache.Cache(stores[0], lease="delete_on_consume")
        stores[1].close()
        with pytest.raises(sluice.FailedPreconditionError, match="closed"):
            caches[1].lookup(key)
    finally:
        for s in stores:
            s.close()


def test_a_python_encoder_with_a_cache_lets_cached_jobs_skip_encode(store):
    """Python workers of a two-stage model: encode caches each text under
    its condition key and hands on a cached input; the orchestrator skips
    encode for a job whose texts are all cached; the final stage reads the
    entries from the store."""
    orch = Proc([SLUICE_BIN, "orchestrator", "--no-output-check", "--store-master",
                 store.endpoint, "--exit-on-stdin-eof"])
    grpc, http = orch.words[2], orch.words[3]
    encoder = cache.ConditionEncoder("py-text", "3", {"dim": 8},
                                     ["prompt", "negative_prompt"])
    s = sluice.Store(store.endpoint)
    conditions = cache.Cache(s)
    encoded = []

    def encode(ctx):
        keys = encoder.keys_for(ctx.request_json)
        request = json.loads(ctx.request_json)
        for key, field in zip(keys, encoder.text_fields):
            text = request.get(field, "")
            conditions.get_or_compute(key, lambda t=text: (encoded.append(t), t.encode())[1])
        return sluice.StageOutput(output=cache.cached_input(keys))

    def render(ctx):
        keys = cache.cached_input_keys(ctx.input)
        return sluice.StageOutput(output=b"|".join(s.get(k) for k in keys),
                                  content_type="image/png")

    pipeline = "encode,render:admission"
    workers = [sluice.StageWorker("encode", grpc, encode, model="py-cached", pipeline=pipeline,
                                  condition_encoder=encoder, caches=[conditions]),
               sluice.StageWorker("render", grpc, render, model="py-cached", pipeline=pipeline)]
    assert all(w.wait_registered(10) for w in workers)

    def post(body):
        req = urllib.request.Request(f"http://{http}/v1/images/generations",
                                     data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())

    try:
        body = {"prompt": "a red kite", "negative_prompt": "fog", "model": "py-cached"}
        status, out = post(body)
        assert status == 200, out
        assert base64.b64decode(out["data"][0]["b64_json"]) == b"a red kite|fog"
        assert encoded == ["a red kite", "fog"]
        status, out = post({**body, "prompt": "a blue kite"})
        assert status == 200, out
        assert encoded == ["a red kite", "fog", "a blue kite"], "the negative prompt was a hit"

        def metrics():
            return urllib.request.urlopen(f"http://{http}/metrics", timeout=5).read().decode()

        deadline = time.time() + 10  # Heartbeats carry the encoder's counters.
        while 'sluice_cache_hits_total{kind="condition"} 1' not in metrics():
            assert time.time() < deadline, "the hit never reached /metrics"
            time.sleep(0.05)
        workers[0].close()  # No encode worker: a cached job must not need one.
        status, out = post(body)
        assert status == 200, out
        assert base64.b64decode(out["data"][0]["b64_json"]) == b"a red kite|fog"
        assert "sluice_orchestrator_cache_skips_total 1" in metrics()
        # The departed worker's counters stay in the totals.
        assert 'sluice_cache_computes_total{kind="condition"} 3' in metrics()
        assert encoder.keys_for(json.dumps(body)) == [
            condition_key("py-text", "3", "a red kite", {"dim": 8}),
            condition_key("py-text", "3", "fog", {"dim": 8})]
        with pytest.raises(sluice.InvalidArgumentError, match="not a cached input"):
            cache.cached_input_keys(b"\x01descriptor")
    finally:
        for w in workers:
            w.close()
        s.close()
        orch.close()


def test_python_finds_the_reference_denoisers_checkpoint_keys():
    """A Python worker computing the reference checkpoint key from a request
    gets the C++ denoiser's key."""
    import struct
    version = _sluice.reference_model_version()  # The shipped weights' identity.
    assert version.startswith("2/") and len(version) == 18, version
    encoder = cache.ConditionEncoder("sluice-reference-text", version,
                                     {"max_length": 64, "dim": 64, "dtype": "f32"},
                                     ["prompt", "negative_prompt"])
    for request in [{"prompt": "a fox", "negative_prompt": "blur", "size": "64x64",
                     "seed": 3, "steps": 6, "guidance": 4.1},
                    {"prompt": "waves", "size": "128x64", "seed": -9, "steps": 12,
                     "guidance": 4.0}]:
        text = json.dumps(request)
        g32 = struct.unpack("<f", struct.pack("<f", request["guidance"]))[0]
        w, h = (int(v) for v in request["size"].split("x"))
        for step in (1, 5):
            assert _sluice.reference_checkpoint_key(text, step) == checkpoint_key(
                model="sluice-reference", model_version=version, sampler="flow_euler_cfg",
                seed=request["seed"], guidance=g32, condition_keys=encoder.keys_for(text),
                total_steps=request["steps"], step=step, shape=[4, 1, h // 4, w // 4],
                dtype="f32")
