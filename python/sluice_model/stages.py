"""The reference model served from PyTorch: encode, denoise and decode as
`sluice.StageWorker` handlers over the mirror (net.py). This is the path a
PyTorch user follows with their own model: parse the job's request, read
the previous stage's payload through a `sluice.DiffusionConnector`,
compute, publish the output for the next stage, report progress.

The payloads are the C++ reference stages' own, so C++ and torch workers
mix in one deployment (a job's encode on one, its denoise on the other):

    encode  -> f32 [2, 64, 64]       the prompt's and the negative prompt's
                                     embeddings (or, with a condition cache,
                                     the C++ encoder's cached entries)
    denoise -> f32 [4, t, h, w]      the latent, one chunk per latent frame
    decode  -> image/png, or a frames archive (a tar of PNG frames)

A job's LoRA adapters ("lora", each with the digest the orchestrator adds)
are read from the store (sluice/adapter/DIGEST) by the denoise worker on
first use and kept, the newest MAX_ADAPTERS.

With --denoise-batch K a denoise worker takes up to K jobs and runs their
steps as one forward (sluice.StepBatcher): each job keeps its own sampler
loop, jobs of one latent shape that step together go through the blocks
as one batch (each with its own adapters and step cache), and the job's
stage_done counts steps_batched. With --interactive-alone too, jobs of the
interactive class (ctx.interactive) step alone, outside the batch, as the
C++ worker's flag of that name does: where a batch costs each member more
than a step alone (a CPU), a person waiting is not slowed by other jobs.

Run one stage as a worker process:

    PYTHONPATH=build/python:python /usr/bin/python3 -m sluice_model.stages \\
        --stage denoise --orchestrator HOST:PORT --master HOST:PORT

It prints "READY worker STAGE" once registered and runs until stdin closes.
"""

import argparse
import base64
import collections
import contextlib
import io
import json
import sys
import tarfile
from typing import Optional

import numpy as np
import torch

import sluice
from sluice import StageOutput, StageWorker, cache
from sluice.worker import ADAPTER_LABEL_PREFIX
from sluice.diffusion import DiffusionConnector, StagePayload, StoreConfig, descriptor_to_json

from . import golden, net, png

TEXT_BYTES = net.TEXT_LEN * net.TEXT_DIM * 4
# Adapters a denoise worker keeps in memory (by digest; the oldest dropped).
MAX_ADAPTERS = 16


class Request:
    """The fields of a job's request the reference stages read (the C++
    reference::ParseRequest's defaults: 128x128, 12 steps, guidance 4)."""

    def __init__(self, text: str):
        j = json.loads(text)
        if not isinstance(j, dict) or not isinstance(j.get("prompt"), str):
            raise sluice.InvalidArgumentError("prompt: required, a string")
        self.prompt = j["prompt"]
        self.negative = j.get("negative_prompt", "")
        self.width, self.height = (int(v) for v in j.get("size", "128x128").split("x"))
        self.seed = int(j.get("seed", 0))
        self.steps = int(j.get("steps", 12))
        self.guidance = float(j.get("guidance", 4.0))
        self.frames = int(j.get("frames", 1))
        self.video = "frames" in j
        self.preview_every = int(j.get("preview_every", 0))
        # step_cache {"threshold": t}, 0..1 (0: off); None: the worker's default.
        self.step_cache = None
        if "step_cache" in j:
            c = j["step_cache"]
            t = c.get("threshold") if isinstance(c, dict) and len(c) == 1 else None
            if (not isinstance(t, (int, float)) or isinstance(t, bool)
                    or not 0 <= t <= 1):
                raise sluice.InvalidArgumentError(
                    'step_cache: {"threshold": a number in 0..1} (0: off)')
            self.step_cache = float(t)
        # LoRA adapters: (name, scale, digest) each, the digest the
        # orchestrator's (it names the file in the store).
        self.lora = []
        lora = j.get("lora", [])
        if not isinstance(lora, list) or len(lora) > 4:
            raise sluice.InvalidArgumentError("lora: a list of at most 4 adapters")
        for i, e in enumerate(lora):
            name, scale, digest = (e.get("name"), e.get("scale", 1.0), e.get("digest")) \
                if isinstance(e, dict) else (None, None, None)
            if not isinstance(name, str) or not name:
                raise sluice.InvalidArgumentError(f"lora[{i}].name: required, a string")
            if (not isinstance(scale, (int, float)) or isinstance(scale, bool)
                    or not -4 <= scale <= 4):
                raise sluice.InvalidArgumentError(f"lora[{i}].scale: a number in -4..4")
            if (not isinstance(digest, str) or len(digest) != 16
                    or any(c not in "0123456789abcdef" for c in digest)):
                raise sluice.InvalidArgumentError(
                    f"lora[{i}]: no digest (the orchestrator names each adapter's file)")
            self.lora.append((name, float(scale), digest))
        # An image edit: the picture (a base64 PNG; the orchestrator scaled
        # it to the request's size) and its strength (0, 1], default 0.8.
        self.picture = None
        self.strength = 0.8
        if "image" in j:
            try:
                self.picture = png.decode(base64.b64decode(j["image"], validate=True))
            except Exception as e:  # noqa: BLE001 - any malformed picture is the request's fault
                raise sluice.InvalidArgumentError(f"image: not a base64 PNG ({e})") from e
            s = j.get("strength", 0.8)
            if not isinstance(s, (int, float)) or isinstance(s, bool) or not 0 < s <= 1:
                raise sluice.InvalidArgumentError("strength: a number in (0, 1]")
            self.strength = float(s)

    def latent_shape(self):
        t = 1 + (self.frames - 1 + 3) // 4
        # Latent cells: a multiple of the DiT's patch covering px / SCALE.
        cells = net.SCALE * net.PATCH
        return (net.LATENT, t, (self.height + cells - 1) // cells * net.PATCH,
                (self.width + cells - 1) // cells * net.PATCH)


class TorchStages:
    """Handlers for each stage over one model and one connector. `store`
    (a sluice store client) reads condition-cache entries when encode ran
    with the cache."""

    def __init__(self, model: net.Model, conn: DiffusionConnector, store=None,
                 step_cache_threshold: float = 0.0, denoise_batch: int = 1,
                 interactive_alone: bool = False):
        self.model = model
        # Denoise: the steps of up to denoise_batch jobs run as one forward;
        # with interactive_alone, an interactive job's run outside it.
        self.batcher = (sluice.StepBatcher(self.forward_batch, max_batch=denoise_batch)
                        if denoise_batch > 1 else None)
        self.interactive_alone = interactive_alone
        self.conn = conn
        # Denoise: the step cache's threshold for a request naming none.
        self.step_cache_threshold = step_cache_threshold
        self.store = store
        self.cache = None if store is None else cache.Cache(store, "condition")
        # Denoise: adapters read from the store, by digest, the newest
        # MAX_ADAPTERS kept (a dropped one is read again when named).
        self.adapters = collections.OrderedDict()

    # -- helpers -------------------------------------------------------------
    def _publish(self, ctx, stage: str, kind: str, tensor: np.ndarray, chunks: int) -> StageOutput:
        h = self.conn.publish(StagePayload(
            request_id=f"job-{ctx.job_id}-{stage}", kind=kind, tensor=tensor,
            chunk_dim=1 if chunks > 1 else None, num_chunks=chunks, lease="pinned"))
        h.wait(300)
        if h.mode == "p2p":
            h.wait_released(300)  # The consumer reads from this buffer.
        self.conn.forget(tensor)
        return StageOutput(output=h.descriptor(), payload_keys=store_keys(h.descriptor()))

    def _condition(self, ctx) -> torch.Tensor:
        if cache.is_cached_input(ctx.input):
            if self.cache is None:
                raise sluice.FailedPreconditionError("a cached input needs a store (--master)")
            parts = []
            for key in cache.cached_input_keys(ctx.input):
                v = self.cache.lookup(key)
                if v is None or len(v) != TEXT_BYTES:
                    raise sluice.NotFoundError(f"input: cached entry {key} is unreadable")
                parts.append(np.frombuffer(v, np.float32).reshape(net.TEXT_LEN, net.TEXT_DIM))
            return torch.from_numpy(np.stack(parts))
        cond = np.empty((2, net.TEXT_LEN, net.TEXT_DIM), np.float32)
        for _ in self.conn.consume(ctx.input, cond):
            pass
        return torch.from_numpy(cond)

    def _adapters(self, ctx, r: "Request"):
        """The request's adapters as Model.blocks takes them, each read from
        the store on first use (counted as the job's adapter_loads)."""
        terms, loads = [], 0
        for name, scale, digest in r.lora:
            tensors = self.adapters.get(digest)
            if tensors is None:
                if self.store is None:
                    raise sluice.FailedPreconditionError(
                        f'adapter "{name}" ({digest}): this worker has no store (--master)')
                try:
                    data = self.store.get(f"sluice/adapter/{digest}")
                except sluice.SluiceError as e:  # Not NotFound: that re-runs encode.
                    raise sluice.FailedPreconditionError(
                        f'adapter "{name}" ({digest}): not in the store ({e}); register it '
                        'again') from e
                try:
                    tensors = net.adapter_from_bytes(data, f'adapter "{name}"')
                except ValueError as e:
                    raise sluice.InvalidArgumentError(str(e)) from e
                loads += 1
                self.adapters[digest] = tensors
                while len(self.adapters) > MAX_ADAPTERS:
                    self.adapters.popitem(last=False)
            self.adapters.move_to_end(digest)
            terms.append((tensors, scale))
        if r.lora:
            ctx.add_count("adapter_loads", loads)
            # What this worker holds now (loading may have dropped others):
            # the orchestrator draws their jobs here, and no longer those
            # of the dropped ones.
            ctx.set_held([ADAPTER_LABEL_PREFIX + d for d in reversed(self.adapters)])
        return terms

    # -- the stages ----------------------------------------------------------
    @torch.no_grad()
    def encode(self, ctx) -> StageOutput:
        r = Request(ctx.request_json)
        cond = self.model.encode_text([r.prompt, r.negative]).numpy().astype(np.float32)
        return self._publish(ctx, "encode", "embedding", np.ascontiguousarray(cond), 1)

    @torch.no_grad()
    def denoise(self, ctx) -> StageOutput:
        r = Request(ctx.request_json)
        cond = self._condition(ctx)
        shape = r.latent_shape()
        x = torch.from_numpy(net.initial_noise(r.seed, shape))[None]
        start = 0
        if r.picture is not None:
            x, start = self.edit_start(r, x)
        step_cache = net.StepCache(
            self.step_cache_threshold if r.step_cache is None else r.step_cache)
        lora = self._adapters(ctx, r)
        # Batching: a member of its shape's batches from its first step to
        # its last (or its stop), counting the steps it shared; an
        # interactive job alone where the worker says so.
        key = tuple(shape)
        batched = 0
        batcher = self.batcher
        if batcher is not None and self.interactive_alone and ctx.interactive:
            batcher = None
        with batcher.member(key) if batcher else contextlib.nullcontext():
            for i in range(start, r.steps):
                if ctx.should_stop():
                    raise sluice.CancelledError(f"stopped at step {i}")
                # The C++ sampler's float32 arithmetic: sigma, next and their ratio.
                sigma = np.float32(1) - np.float32(i) / np.float32(r.steps)
                nxt = np.float32(1) - np.float32(i + 1) / np.float32(r.steps)
                item = (torch.cat([x, x]), torch.full((2,), float(sigma)), cond[0:2], lora,
                        step_cache)
                if batcher is not None:
                    both, n = batcher.step(key, item)
                    batched += n > 1
                else:
                    both = self.forward_batch([item])[0]
                x0 = both[1:2] + np.float32(r.guidance) * (both[0:1] - both[1:2])
                x = x + float(np.float32((nxt - sigma) / sigma)) * (x - x0)
                done = i + 1
                if r.preview_every > 0 and (done % r.preview_every == 0 or done == r.steps):
                    ctx.preview(done, self.preview_png(x0[0, :, 0]))
                ctx.progress(done, r.steps)
        ctx.add_count("steps", step_cache.computed + step_cache.skipped)
        if self.batcher is not None:
            ctx.add_count("steps_batched", batched)
        if step_cache.threshold > 0:
            ctx.add_count("steps_skipped", step_cache.skipped)
        latent = np.ascontiguousarray(x[0].numpy().astype(np.float32))
        return self._publish(ctx, "denoise", "latent", latent, shape[1] if shape[1] > 1 else 1)

    @torch.no_grad()
    def forward_batch(self, items):
        """The denoiser's predictions for one step of each of several jobs
        (a StepBatcher's run): each item is (x, sigma, cond, lora,
        step_cache) for one job's guidance branches. Each job's step cache
        may skip its blocks; the others' go through them as one batch, each
        job's adapters on its own rows. A lone job runs StepCache.step's
        arithmetic exactly; in a batch a job's prediction is within float32
        rounding of that."""
        out = [None] * len(items)
        run = []  # (item index, X, c2) of the jobs running the blocks.
        for i, (x, sigma, _, _, step_cache) in enumerate(items):
            X, c2, cached = step_cache.begin(self.model, x, sigma)
            if cached is None:
                run.append((i, X, c2))
            else:
                out[i] = cached
        if len(run) == 1:
            i, X, c2 = run[0]
            blocks = [self.model.blocks(X, c2, items[i][2], items[i][3])]
        elif run:
            rows, row_lora, first = [], [], 0
            for i, X, _ in run:
                rows.append(X.shape[0])
                if items[i][3]:
                    row_lora.append((first, first + X.shape[0], items[i][3]))
                first += X.shape[0]
            together = self.model.blocks(torch.cat([X for _, X, _ in run]),
                                         torch.cat([c2 for _, _, c2 in run]),
                                         torch.cat([items[i][2] for i, _, _ in run]),
                                         row_lora=row_lora)
            blocks = together.split(rows)
        for (i, X, c2), b in zip(run, blocks if run else ()):
            out[i] = items[i][4].end(self.model, X, c2, b, items[i][0].shape)
        return out

    @torch.no_grad()
    def decode(self, ctx) -> StageOutput:
        r = Request(ctx.request_json)
        latent = np.empty(r.latent_shape(), np.float32)
        for _ in self.conn.consume(ctx.input, latent):
            pass
        z = torch.from_numpy(latent)
        frames = net.to_uint8(net.frames_from_latent(self.model, z, r.frames))
        frames = frames[:, :r.height, :r.width]
        ctx.first_output()
        pngs = [png.encode(f) for f in frames]
        if not r.video:
            return StageOutput(output=pngs[0], content_type="image/png")
        return StageOutput(output=frames_archive(pngs),
                           content_type="application/x-sluice-frames+tar")

    def edit_start(self, r: Request, noise: torch.Tensor):
        """An edit's first latent and step (the C++ EditStartLatent and
        EditStartStep): its picture, extended to the latent cells' size by
        repeating the last row and column, encoded, and noised at the
        strength's step."""
        if r.picture.shape[:2] != (r.height, r.width):
            raise sluice.InvalidArgumentError(
                f"image: {r.picture.shape[1]}x{r.picture.shape[0]}, not the request's "
                f"{r.width}x{r.height}")
        _, _, h, w = r.latent_shape()
        pic = np.pad(r.picture, ((0, h * net.SCALE - r.height), (0, w * net.SCALE - r.width),
                                 (0, 0)), mode="edge")
        z0 = net.encode_picture(self.model, pic)  # [1, 4, 1, h, w]: every frame starts from it.
        z0 = z0.expand(-1, -1, noise.shape[2], -1, -1)
        start = net.edit_start_step(r.steps, r.strength)
        sigma = np.float32(1) - np.float32(start) / np.float32(r.steps)
        return float(np.float32(1) - sigma) * z0 + float(sigma) * noise, start

    def preview_png(self, z: torch.Tensor) -> bytes:
        """z [4, h, w] through the shipped latent->RGB map, a pixel per
        cell (as the C++ denoise stage makes them)."""
        rgb = net.to_uint8(self.model.preview(z[None]))[0]
        return png.encode(rgb)


def store_keys(descriptor: bytes):
    """The store keys holding a published payload (store mode; the
    orchestrator removes them once the next stage is done), as the C++
    PayloadDescriptor::StoreKeys names them."""
    d = json.loads(descriptor_to_json(descriptor))
    if d["mode"] != "store":
        return []
    if d["one_object"]:
        return [d["key_prefix"] + "/all"]
    return [f"{d['key_prefix']}/{i}" for i in range(d["num_chunks"])]


def frames_archive(pngs) -> bytes:
    """A ustar archive of frame_000000.png, ... (media/frames_archive.h)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i, data in enumerate(pngs):
            info = tarfile.TarInfo(f"frame_{i:06d}.png")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def serve(stage: str, orchestrator: str, master: Optional[str], weights: str = golden.WEIGHTS,
          name: str = "", step_cache_threshold: float = 0.0,
          denoise_batch: int = 1, interactive_alone: bool = False) -> StageWorker:
    """A worker serving `stage` of the reference model from torch;
    `step_cache_threshold` (denoise, 0..1): for requests naming none;
    `denoise_batch` (denoise, 1..64): jobs taken at once, their steps run
    as one forward (1: one job at a time); `interactive_alone` (with
    denoise_batch > 1): interactive jobs step alone, outside the batch."""
    if not 0 <= step_cache_threshold <= 1:
        raise sluice.InvalidArgumentError("step_cache_threshold: must be in 0..1 (0: off)")
    if isinstance(denoise_batch, bool) or not isinstance(denoise_batch, int) or \
            not 1 <= denoise_batch <= 64 or (denoise_batch > 1 and stage != "denoise"):
        raise sluice.InvalidArgumentError(
            f"denoise_batch: an int in 1..64 for a denoise worker, not {denoise_batch!r}")
    if not isinstance(interactive_alone, bool) or (interactive_alone and denoise_batch == 1):
        raise sluice.InvalidArgumentError(
            f"interactive_alone: a bool, True only with denoise_batch > 1, not "
            f"{interactive_alone!r}")
    torch.set_num_threads(1)
    model = golden.load(weights)
    store_cfg = StoreConfig(master=master) if master else None
    conn = DiffusionConnector(stage, "store" if master else "p2p", store_config=store_cfg)
    conn.warm()
    store = sluice.Store(master) if master and stage == "denoise" else None
    stages = TorchStages(model, conn, store, step_cache_threshold, denoise_batch,
                         interactive_alone)
    return StageWorker(stage, orchestrator, getattr(stages, stage), capacity=denoise_batch,
                       model="sluice-reference", name=name or f"torch-{stage}",
                       assignment_timeout=120.0, takes_picture=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stage", choices=["encode", "denoise", "decode"], required=True)
    ap.add_argument("--orchestrator", required=True)
    ap.add_argument("--master", default="")
    ap.add_argument("--weights", default=golden.WEIGHTS)
    ap.add_argument("--step-cache-threshold", type=float, default=0.0,
                    help="denoise: the step cache's threshold for requests naming none (0..1)")
    ap.add_argument("--denoise-batch", type=int, default=1,
                    help="denoise: jobs taken at once, their steps run as one forward (1..64)")
    ap.add_argument("--interactive-alone", action="store_true",
                    help="denoise with --denoise-batch: interactive jobs step alone, outside "
                         "the batch")
    args = ap.parse_args(argv)
    if not 0 <= args.step_cache_threshold <= 1:
        ap.error("--step-cache-threshold: must be in 0..1 (0: off)")
    if not 1 <= args.denoise_batch <= 64 or (args.denoise_batch > 1 and args.stage != "denoise"):
        ap.error("--denoise-batch: 1..64, for --stage denoise")
    if args.interactive_alone and args.denoise_batch == 1:
        ap.error("--interactive-alone: only with --denoise-batch above 1")
    worker = serve(args.stage, args.orchestrator, args.master or None, args.weights,
                   step_cache_threshold=args.step_cache_threshold,
                   denoise_batch=args.denoise_batch,
                   interactive_alone=args.interactive_alone)
    if not worker.wait_registered(30):
        print("torch worker: not registered within 30 s", file=sys.stderr)
        return 1
    print(f"READY worker {args.stage}", flush=True)
    sys.stdin.read()  # Until stdin closes.
    worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
