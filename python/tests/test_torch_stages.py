"""One model, two runtimes: C++ reference workers (`sluice worker`) and the
PyTorch mirror's StageWorkers (python/sluice_model/stages.py) in one
deployment. A job encoded in C++, denoised in torch and decoded in C++ (and
one the other way round) gives the all-C++ picture within PSNR 40 dB."""

import base64
import json
import os
import pathlib
import sys
import urllib.request

import numpy as np
import pytest

import sluice

from conftest import SLUICE_BIN, Proc

# python/ after the built package (build/python/sluice), for sluice_model.
sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))
from sluice_model import golden, png, stages  # noqa: E402

REQUEST = {"prompt": golden.GOLDEN_PROMPT, "size": "128x128", "seed": 1, "steps": 12,
           "guidance": 4, "preview_every": 4}


STEP_CACHED = {**REQUEST, "step_cache": {"threshold": 0.3}}
MIRRORED = {**REQUEST, "lora": [{"name": "mirror"}]}


def generate(http: str, request=None) -> np.ndarray:
    req = urllib.request.Request(f"http://{http}/v1/images/generations",
                                 data=json.dumps(request or REQUEST).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        body = json.loads(r.read())
    return png.decode(base64.b64decode(body["data"][0]["b64_json"]))


def edit(http: str) -> np.ndarray:
    """The golden picture edited to a green circle (multipart, as OpenAI's
    SDKs send it), decoded."""
    boundary = "sluice-torch-edit"
    fields = {"prompt": golden.GOLDEN_EDIT_PROMPT, "strength": "0.6", "seed": "2",
              "steps": "12", "size": "128x128"}
    body = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
                    .encode() for k, v in fields.items())
    body += (f'--{boundary}\r\nContent-Disposition: form-data; name="image"; '
             f'filename="in.png"\r\nContent-Type: image/png\r\n\r\n').encode()
    body += open(golden.GOLDEN, "rb").read() + f"\r\n--{boundary}--\r\n".encode()
    req = urllib.request.Request(f"http://{http}/v1/images/edits", data=body, method="POST",
                                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(req, timeout=120) as r:
        out = json.loads(r.read())
    return png.decode(base64.b64decode(out["data"][0]["b64_json"]))


def generate_counted(http: str, request):
    """The picture and the denoise stage_done event's counts."""
    req = urllib.request.Request(f"http://{http}/v1/images/generations",
                                 data=json.dumps(request).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        body = json.loads(r.read())
    with urllib.request.urlopen(f"http://{http}/v1/jobs/{body['id']}/events", timeout=60) as r:
        events = [json.loads(line[6:]) for line in r.read().decode().splitlines()
                  if line.startswith("data: ")]
    counts = [e.get("counts") for e in events
              if e.get("type") == "stage_done" and e["stage"] == "denoise"][0]
    return png.decode(base64.b64decode(body["data"][0]["b64_json"])), counts


def cpp_worker(stage, orch, master):
    return Proc([SLUICE_BIN, "worker", "--stage", stage, "--orchestrator", orch, "--master",
                 master, "--exit-on-stdin-eof"])


def test_cpp_and_torch_workers_serve_one_model(store, tmp_path):
    adapters = tmp_path / "adapters"
    adapters.mkdir()
    (adapters / "mirror.safetensors").write_bytes(open(golden.MIRROR_ADAPTER, "rb").read())
    orch = Proc([SLUICE_BIN, "orchestrator", "--store-master", store.endpoint,
                 "--adapters", str(adapters), "--exit-on-stdin-eof"])
    grpc, http = orch.words[2], orch.words[3]
    cpp = {}
    try:
        # Torch encode and decode around a C++ denoise (nothing cached yet:
        # the torch encoder runs and publishes the condition itself).
        cpp["denoise"] = cpp_worker("denoise", grpc, store.endpoint)
        workers = [stages.serve(s, grpc, store.endpoint) for s in ("encode", "decode")]
        try:
            assert all(w.wait_registered(30) for w in workers)
            around = generate(http)
            assert [w.completed for w in workers] == [1, 1]
        finally:
            for w in workers:
                w.close()

        # All C++: the picture to match (its encoder caches the condition).
        cpp["encode"] = cpp_worker("encode", grpc, store.endpoint)
        cpp["decode"] = cpp_worker("decode", grpc, store.endpoint)
        want = generate(http)
        want_cached, cpp_counts = generate_counted(http, STEP_CACHED)
        want_edit = edit(http)

        # The C++ denoise worker leaves, torch's joins: it reads the cached
        # condition and hands its latent to the C++ decoder.
        cpp.pop("denoise").close()
        w = stages.serve("denoise", grpc, store.endpoint)
        try:
            assert w.wait_registered(30)
            inside = generate(http)
            inside_cached, torch_counts = generate_counted(http, STEP_CACHED)
            inside_edit = edit(http)
            # A LoRA adapter, read from the store where the orchestrator
            # put it, once: the mirror's golden picture.
            mirrored, first_counts = generate_counted(http, MIRRORED)
            _, again_counts = generate_counted(http, MIRRORED)
            assert w.completed == 5
        finally:
            w.close()
        want_mirror = png.decode(open(golden.GOLDEN_MIRROR, "rb").read())
        assert golden.psnr(mirrored, want_mirror) >= 40.0, golden.psnr(mirrored, want_mirror)
        assert first_counts["adapter_loads"] == 1 and again_counts["adapter_loads"] == 0, \
            (first_counts, again_counts)
        for got in (around, inside):
            assert got.shape == want.shape == (128, 128, 3)
            assert golden.psnr(got, want) >= 40.0, golden.psnr(got, want)
        # The step cache skips the same steps in both runtimes.
        assert cpp_counts["steps"] == 12 and 0 < cpp_counts["steps_skipped"] < 12, cpp_counts
        assert torch_counts == cpp_counts, (torch_counts, cpp_counts)
        assert golden.psnr(inside_cached, want_cached) >= 40.0, golden.psnr(inside_cached,
                                                                            want_cached)
        # An image edit denoised in torch is the C++ one's, and the mirror's golden edit.
        assert golden.psnr(inside_edit, want_edit) >= 40.0, golden.psnr(inside_edit, want_edit)
        golden_edit = png.decode(open(golden.GOLDEN_EDIT, "rb").read())
        assert golden.psnr(want_edit, golden_edit) >= 40.0, golden.psnr(want_edit, golden_edit)
    finally:
        for p in cpp.values():
            p.close()
        orch.close()


def test_the_denoise_worker_says_which_adapters_it_holds_newest_first():
    class Ctx:
        held, counts = None, {}

        def add_count(self, name, n):
            self.counts[name] = n

        def set_held(self, labels):
            self.held = labels

    class Store:
        def get(self, key):
            return open(golden.MIRROR_ADAPTER, "rb").read()

    torch_stages = stages.TorchStages(None, None)
    torch_stages.store = Store()  # Where adapters are read from.
    digests = [f"{i:016x}" for i in range(stages.MAX_ADAPTERS + 2)]
    ctx = Ctx()
    for d in digests:  # One job per adapter: the oldest two are dropped.
        torch_stages._adapters(ctx, stages.Request(json.dumps(
            {"prompt": "a", "lora": [{"name": "m", "digest": d}]})))
    assert ctx.held == ["adapter=" + d for d in reversed(digests[2:])]
    # A job naming one again makes it the newest; a job without adapters
    # says nothing.
    torch_stages._adapters(ctx, stages.Request(json.dumps(
        {"prompt": "a", "lora": [{"name": "m", "digest": digests[5]}]})))
    assert ctx.held[0] == "adapter=" + digests[5] and len(ctx.held) == stages.MAX_ADAPTERS
    ctx.held = None
    torch_stages._adapters(ctx, stages.Request(json.dumps({"prompt": "a"})))
    assert ctx.held is None


def test_request_defaults_and_frames_archive_match_the_cpp_stages():
    r = stages.Request(json.dumps({"prompt": "a", "size": "96x64", "frames": 17}))
    assert r.latent_shape() == (4, 5, 16, 24)
    assert r.steps == 12 and r.guidance == 4.0 and r.video
    assert r.step_cache is None
    cached = stages.Request(json.dumps({"prompt": "a", "step_cache": {"threshold": 0.25}}))
    assert cached.step_cache == 0.25
    for bad in (0.2, {}, {"threshold": 2}, {"threshold": "0.2"}, {"threshold": True},
                {"threshold": 0.2, "every": 1}):
        with pytest.raises(sluice.InvalidArgumentError, match="step_cache"):
            stages.Request(json.dumps({"prompt": "a", "step_cache": bad}))
    for bad in ({"image": "not base64!"}, {"image": base64.b64encode(b"png?").decode()},
                {"image": base64.b64encode(open(golden.GOLDEN, "rb").read()).decode(),
                 "strength": 0}):
        with pytest.raises(sluice.InvalidArgumentError, match="image|strength"):
            stages.Request(json.dumps({"prompt": "a", **bad}))
    lora = stages.Request(json.dumps({"prompt": "a", "lora": [
        {"name": "mirror", "scale": 0.5, "digest": "0123456789abcdef"}]}))
    assert lora.lora == [("mirror", 0.5, "0123456789abcdef")]
    for bad, field in (({"name": "m"}, "lora\\[0\\]: no digest"),
                       ({"digest": "0123456789abcdef"}, "lora\\[0\\].name"),
                       ({"name": "m", "scale": 9, "digest": "0123456789abcdef"},
                        "lora\\[0\\].scale")):
        with pytest.raises(sluice.InvalidArgumentError, match=field):
            stages.Request(json.dumps({"prompt": "a", "lora": [bad]}))
    tar = stages.frames_archive([b"one", b"two"])
    assert len(tar) % 512 == 0 and b"frame_000001.png" in tar
