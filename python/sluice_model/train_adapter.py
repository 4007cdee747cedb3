"""Trains a LoRA adapter for the shipped reference weights and writes it.

    cd python && /usr/bin/python3 -m sluice_model.train_adapter --kind mirror \\
        --out ../models/adapters/mirror.safetensors

The base weights stay frozen; the adapter's low-rank updates of every DiT
block's layers (net.ADAPTED_LAYERS) learn to draw each caption's scene
transformed by --kind:

  mirror   the scene mirrored left to right ("on the left" draws on the
           right); `sluice eval --lora mirror --mirrored` scores it by
           mirroring each output back.

The data are freshly drawn training-split scenes (held-out colour-shape
pairs never appear), rendered, transformed and encoded by the base VAE;
the loss is the base recipe's (flow matching on the clean latent, object
cells weighted 4x, the cells where shapes differ up to --shape-weight x
more, a quarter of the samples at pure noise, 10% without a caption).
lora_a starts as fan-in scaled normals and lora_b at zero, so the adapter
starts as the base model. Same seed, thread count and torch build: the
same bytes.
"""

import argparse
import hashlib
import sys
import time

import numpy as np
import torch

from . import golden, net, safetensors, scenes, train

KINDS = ("mirror",)


def transform(kind: str, img: np.ndarray) -> np.ndarray:
    """The picture the adapter learns to draw for a scene rendered as img."""
    assert kind == "mirror"
    return np.ascontiguousarray(img[:, ::-1])


@torch.no_grad()
def build_images(model: net.Model, rng, kind: str, n: int):
    """(latents [n, 4, 1, 32, 32], captions, shape cells [n, 1, 1, 32, 32])."""
    caps, lat, cells = [], [], []
    for start in range(0, n, 64):
        sc = [scenes.random_scene(rng, "train") for _ in range(min(64, n - start))]
        caps += [s.caption() for s in sc]
        imgs = np.stack([transform(kind, scenes.render(s, train.SIZE)) for s in sc])
        lat.append(model.encode(train.to_tensor(imgs)))
        cells.append(torch.from_numpy(np.stack(
            [np.ascontiguousarray(train.shape_cells(s)[:, ::-1]) for s in sc])))
    return torch.cat(lat)[:, :, None], caps, torch.cat(cells)[:, None, None]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", choices=KINDS, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--weights", default=golden.WEIGHTS, help="the base weights")
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--images", type=int, default=4000)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--shape-weight", type=float, default=20.0)
    ap.add_argument("--layout-share", type=float, default=0.25)
    ap.add_argument("--eval", type=int, default=32,
                    help="score this many held-out prompts at the end (0: skip)")
    args = ap.parse_args(argv)
    if not 1 <= args.rank <= net.MAX_ADAPTER_RANK:
        ap.error(f"--rank: {args.rank} is not in [1, {net.MAX_ADAPTER_RANK}]")
    if args.steps < 1 or args.images < 64 or args.batch < 1:
        ap.error("--steps, --batch >= 1 and --images >= 64")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    start = time.time()
    model = golden.load(args.weights)
    for p in model.w.parameters():
        p.requires_grad_(False)
    lat, caps, cells = build_images(model, rng, args.kind, args.images)
    train.log(f"{args.images} {args.kind} images encoded ({time.time() - start:.0f} s)")
    init = {}
    for name, shape in net.adapter_shapes(args.rank).items():
        if name.endswith(".lora_a"):
            init[name] = torch.from_numpy(
                (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))
        else:
            init[name] = torch.zeros(shape)
    lora = {n: t.requires_grad_(True) for n, t in init.items()}
    opt = torch.optim.AdamW(list(lora.values()), lr=args.lr, weight_decay=0.0)
    t0 = time.time()
    avg = None
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = train.lr_at(step, args.steps, args.lr, 50)
        idx = rng.integers(0, lat.shape[0], args.batch)
        x0 = lat[idx]
        texts = [caps[i] if rng.uniform() >= 0.1 else "" for i in idx]
        u = np.where(rng.uniform(size=args.batch) < 0.5, rng.uniform(size=args.batch),
                     1 / (1 + np.exp(-rng.standard_normal(args.batch))))
        u = np.where(rng.uniform(size=args.batch) < args.layout_share, 1.0, u)
        sigma = torch.from_numpy(u.astype(np.float32)).clamp_min(1e-3)
        eps = torch.from_numpy(rng.standard_normal(x0.shape).astype(np.float32))
        s = sigma.view(-1, 1, 1, 1, 1)
        with torch.no_grad():
            cond = model.encode_text(texts)
        pred = model.denoise((1 - s) * x0 + s * eps, sigma, cond, [(lora, 1.0)])
        bg = x0.flatten(2).median(dim=2).values[:, :, None, None, None]
        obj = ((x0 - bg).abs().mean(dim=1, keepdim=True) > 0.5).float()
        weight = 1 + 3 * obj + args.shape_weight * cells[idx]
        loss = torch.mean(weight * (pred - x0) ** 2) / torch.mean(weight)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(lora.values()), 1.0)
        opt.step()
        avg = float(loss) if avg is None else 0.98 * avg + 0.02 * float(loss)
        if step % 50 == 0 or step == args.steps - 1:
            train.log(f"adapter step {step} loss {float(loss):.4f} avg {avg:.4f} "
                      f"({time.time() - t0:.0f} s)")
    tensors = {n: t.detach().numpy() for n, t in lora.items()}
    base_meta = safetensors.load(args.weights)[1]
    meta = {"format": net.ADAPTER_FORMAT, "version": net.ADAPTER_VERSION,
            "base": f"{base_meta['format']}/{base_meta['version']}", "rank": str(args.rank),
            "name": args.kind, "seed": str(args.seed),
            "train_args": " ".join(sys.argv[1:] if argv is None else argv)}
    safetensors.save(args.out, tensors, meta)
    digest = hashlib.sha256(open(args.out, "rb").read()).hexdigest()
    train.log(f"wrote {args.out} sha256 {digest} after {time.time() - start:.0f} s")
    if args.eval:
        adapter = net.load_adapter(args.out)
        for scale in (0.0, 1.0):
            train.log(f"heldout scale {scale}: "
                      f"{score(model, adapter, scale, args.kind, args.eval, 7)}")
    return 0


@torch.no_grad()
def score(model: net.Model, adapter, scale: float, kind: str, n: int, seed: int) -> dict:
    """Held-out scores of the outputs with the adapter at `scale`,
    transformed back (for mirror: mirrored) before the analyser reads them."""
    rng = np.random.default_rng(seed)
    sc = [scenes.random_scene(rng, "heldout") for _ in range(n)]
    g = train.SIZE // net.SCALE
    z = net.sample(model, [s.caption() for s in sc], (1, g, g), range(n),
                   lora=[(adapter, scale)])
    imgs = net.to_uint8(model.decode(z[:, :, 0]))
    marks = [scenes.score(s, transform(kind, im)) for s, im in zip(sc, imgs)]
    return {k: float(np.mean([m[k] for m in marks])) for k in marks[0]}


if __name__ == "__main__":
    sys.exit(main())
