"""The PyTorch mirror's denoise batching (python/sluice_model/stages.py,
sluice.StepBatcher): jobs stepping together, each with its own adapters and
step cache, sample as each would alone (a lone step exactly; in a batch
within float32 rounding), and a denoise worker taking two or three jobs at
once serves them with their pictures and counts steps_batched."""

import json
import pathlib
import sys
import threading
import time
import urllib.request

import numpy as np
import torch

import sluice

from conftest import SLUICE_BIN, Proc
from test_torch_stages import MIRRORED, REQUEST, STEP_CACHED, cpp_worker, generate_counted

sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))
from sluice_model import golden, net, png, stages  # noqa: E402


def sample(torch_stages, jobs, batched):
    """Samples `jobs` (request dicts, with "lora" as (tensors, scale) terms)
    as TorchStages.denoise does, every step of every job in one
    forward_batch (batched) or each job's alone; the final latents and
    step caches."""
    model = torch_stages.model
    states = []
    for j in jobs:
        r = stages.Request(json.dumps({k: v for k, v in j.items() if k != "lora"}))
        cond = model.encode_text([r.prompt, r.negative]).float()
        x = torch.from_numpy(net.initial_noise(r.seed, r.latent_shape()))[None]
        states.append({"r": r, "x": x, "cond": cond, "lora": j.get("lora", []),
                       "cache": net.StepCache(r.step_cache or 0.0)})
    with torch.no_grad():
        for i in range(12):
            sigma = np.float32(1) - np.float32(i) / np.float32(12)
            nxt = np.float32(1) - np.float32(i + 1) / np.float32(12)
            items = [(torch.cat([s["x"], s["x"]]), torch.full((2,), float(sigma)), s["cond"],
                      s["lora"], s["cache"]) for s in states]
            outs = (torch_stages.forward_batch(items) if batched
                    else [torch_stages.forward_batch([item])[0] for item in items])
            for s, both in zip(states, outs):
                x0 = both[1:2] + np.float32(s["r"].guidance) * (both[0:1] - both[1:2])
                s["x"] = s["x"] + float(np.float32((nxt - sigma) / sigma)) * (s["x"] - x0)
    return [s["x"] for s in states], [s["cache"] for s in states]


def queued(http: str, stage: str) -> int:
    """Work queued for `stage`, from the orchestrator's /metrics."""
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in lines
               if line.startswith("sluice_orchestrator_queued{") and f'stage="{stage}"' in line)


def test_a_batch_mixing_adapters_and_step_caches_samples_each_as_it_would_alone():
    torch.set_num_threads(1)
    torch_stages = stages.TorchStages(golden.load(), None)
    mirror = net.load_adapter(golden.MIRROR_ADAPTER)
    jobs = [REQUEST, {**REQUEST, "lora": [(mirror, 1.0)]},
            {**STEP_CACHED, "seed": 3, "lora": [(mirror, 0.5)]},
            {**REQUEST, "prompt": "a small green square on the right", "seed": 4}]
    alone, alone_caches = sample(torch_stages, jobs, batched=False)
    together, caches = sample(torch_stages, jobs, batched=True)
    for a, b in zip(alone, together):
        assert float((a - b).abs().max()) < 1e-4
    # Each job's step cache skipped the same steps either way.
    assert [c.skipped for c in caches] == [c.skipped for c in alone_caches]
    assert caches[2].skipped > 0
    # Alone, the golden pictures.
    with torch.no_grad():
        pictures = [net.to_uint8(torch_stages.model.decode(x[:, :, 0]))[0] for x in alone[:2]]
    for got, want in zip(pictures, (golden.GOLDEN, golden.GOLDEN_MIRROR)):
        want = png.decode(open(want, "rb").read())
        assert golden.psnr(got, want) >= 40.0, golden.psnr(got, want)
    # A lone step is StepCache.step's, bit for bit.
    model = torch_stages.model
    x = torch.from_numpy(net.initial_noise(1, (4, 1, 32, 32)))[None]
    cond = model.encode_text([golden.GOLDEN_PROMPT, ""]).float()
    with torch.no_grad():
        for lora in ([], [(mirror, 0.7)]):
            item = (torch.cat([x, x]), torch.full((2,), 0.75), cond, lora, net.StepCache())
            want = net.StepCache().step(model, *item[:4])
            assert torch.equal(torch_stages.forward_batch([item])[0], want)


class FakeContext:
    """What TorchStages.denoise reads of a sluice stage context, and the
    counts it adds."""

    def __init__(self, request, interactive):
        self.job_id = 0
        self.request_json = json.dumps(request)
        self.interactive = interactive
        self.counts = {}
        self.latent = None

    def should_stop(self):
        return False

    def progress(self, done, total):
        pass

    def preview(self, step, png_bytes):
        pass

    def add_count(self, name, n):
        self.counts[name] = self.counts.get(name, 0) + n


def without_connector(torch_stages):
    """`torch_stages` with its condition encoded here and its latent kept on
    the context (ctx.latent) instead of read and published."""
    def condition(ctx):
        r = stages.Request(ctx.request_json)
        return torch_stages.model.encode_text([r.prompt, r.negative]).float()

    def publish(ctx, stage, kind, tensor, chunks):
        ctx.latent = tensor

    torch_stages._condition = condition
    torch_stages._publish = publish
    return torch_stages


def test_an_interactive_job_steps_alone_when_the_worker_says_so():
    torch.set_num_threads(1)
    model = golden.load()
    interactive = {**REQUEST, "prompt": "a small green square on the right", "seed": 4}
    jobs = [(REQUEST, False), ({**REQUEST, "seed": 2}, False), (interactive, True)]
    # Each job alone: its pipeline's latent, bit for bit.
    alone = []
    for r, i in jobs:
        ctx = FakeContext(r, i)
        without_connector(stages.TorchStages(model, None)).denoise(ctx)
        alone.append(ctx.latent)
    for interactive_alone in (True, False):
        ts = without_connector(stages.TorchStages(model, None, denoise_batch=3,
                                                  interactive_alone=interactive_alone))
        # A wide gather: a step waits for every member's, so members share.
        ts.batcher = sluice.StepBatcher(ts.forward_batch, max_batch=3, gather=2.0)
        ctxs = [FakeContext(r, i) for r, i in jobs]
        threads = [threading.Thread(target=ts.denoise, args=(c,)) for c in ctxs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        latents = [c.latent for c in ctxs]
        assert all(x is not None for x in latents)
        shared = [c.counts["steps_batched"] for c in ctxs]
        assert shared[0] > 0 and shared[1] > 0, shared
        if interactive_alone:
            assert shared[2] == 0, shared
            assert np.array_equal(latents[2], alone[2])
        else:
            assert shared[2] > 0, shared
        for got, want in zip(latents, alone):
            assert float(np.abs(got - want).max()) < 1e-4
    for bad in ("yes", 1):
        try:
            stages.serve("denoise", "127.0.0.1:1", None, denoise_batch=2, interactive_alone=bad)
            assert False, f"interactive_alone {bad!r} is refused"
        except sluice.InvalidArgumentError as e:
            assert "interactive_alone" in str(e)
    try:
        stages.serve("denoise", "127.0.0.1:1", None, interactive_alone=True)
        assert False, "interactive_alone without batching is refused"
    except sluice.InvalidArgumentError as e:
        assert "denoise_batch" in str(e)
    try:
        stages.main(["--stage", "denoise", "--orchestrator", "127.0.0.1:1",
                     "--interactive-alone"])
        assert False, "--interactive-alone without --denoise-batch is refused"
    except SystemExit as e:
        assert e.code == 2


def test_a_batching_torch_denoise_worker_serves_jobs_together(store, tmp_path):
    adapters = tmp_path / "adapters"
    adapters.mkdir()
    (adapters / "mirror.safetensors").write_bytes(open(golden.MIRROR_ADAPTER, "rb").read())
    # Three denoise jobs may hold the one decode slot's reservation.
    orch = Proc([SLUICE_BIN, "orchestrator", "--store-master", store.endpoint,
                 "--adapters", str(adapters), "--admission-overcommit", "3",
                 "--exit-on-stdin-eof"])
    grpc, http = orch.words[2], orch.words[3]
    cpp = [cpp_worker(s, grpc, store.endpoint) for s in ("encode", "decode")]
    try:
        try:
            stages.serve("denoise", grpc, store.endpoint, denoise_batch=3, name="x",
                         step_cache_threshold=2)
            assert False, "a threshold above 1 is refused"
        except sluice.InvalidArgumentError:
            pass
        for bad in (0, 65, "2"):
            try:
                stages.serve("denoise", grpc, store.endpoint, denoise_batch=bad)
                assert False, f"denoise_batch {bad!r} is refused"
            except sluice.InvalidArgumentError as e:
                assert "denoise_batch" in str(e)
        # Three jobs, queued for denoise before its worker comes: the golden
        # request, its mirrored one and a step-cached one, all handed at
        # once to the worker taking three.
        got = {}
        requests = {"plain": REQUEST, "mirrored": MIRRORED, "cached": STEP_CACHED}
        threads = [threading.Thread(target=lambda k=k: got.__setitem__(
            k, generate_counted(http, requests[k]))) for k in requests]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while queued(http, "denoise") < 3:
            assert time.monotonic() < deadline, "the jobs never queued for denoise"
            time.sleep(0.05)
        w = stages.serve("denoise", grpc, store.endpoint, denoise_batch=3)
        try:
            assert w.wait_registered(30)
            for t in threads:
                t.join(180)
            assert sorted(got) == sorted(requests), got.keys()
            # The step-cached job again, alone: its batched picture is within
            # rounding of it.
            alone_cached, alone_counts = generate_counted(http, STEP_CACHED)
            assert w.completed == 4
        finally:
            w.close()
        batched = [got[k][1].get("steps_batched", 0) for k in requests]
        assert all(b > 0 for b in batched), {k: got[k][1] for k in got}
        assert alone_counts["steps_batched"] == 0, alone_counts
        assert 0 < got["cached"][1]["steps_skipped"] < 12, got["cached"][1]
        want = png.decode(open(golden.GOLDEN, "rb").read())
        want_mirror = png.decode(open(golden.GOLDEN_MIRROR, "rb").read())
        assert golden.psnr(got["plain"][0], want) >= 40.0, golden.psnr(got["plain"][0], want)
        assert golden.psnr(got["mirrored"][0], want_mirror) >= 40.0, \
            golden.psnr(got["mirrored"][0], want_mirror)
        assert golden.psnr(got["cached"][0], alone_cached) >= 40.0, \
            golden.psnr(got["cached"][0], alone_cached)
    finally:
        for p in cpp:
            p.close()
        orch.close()
