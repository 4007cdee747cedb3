"""Prompt adherence of the PyTorch mirror, scored by the scene analyser
(weights before they ship; a running server is scored by `sluice eval`).

    cd python && /usr/bin/python3 -m sluice_model.evaluate --prompts 96 --split heldout --json

Draws --prompts scenes of the split (seed --seed), generates each (seed =
its index) with the PyTorch mirror, scores it (scenes.score) and prints the
mean of each attribute: color_accuracy, shape_accuracy, position_accuracy,
background_accuracy, and for --videos direction_accuracy, with samples;
for images also small_shape_accuracy and large_shape_accuracy, shape over
the one-object scenes of each size (null where there are none), and
shape_read_as: for each shape asked for (each scene's first object), what
the analyser read the object of that colour as ("none": no such object).
--grid writes a PNG of the first 16 outputs (the prompts go to stderr).
"""

import argparse
import json
import sys

import numpy as np
import torch

from . import golden, net, png, scenes


def generate_torch(model, prompts, seeds, guidance, steps, video):
    if video:
        g = 128 // net.SCALE
        z = net.sample(model, prompts, (5, g, g), seeds, steps=steps, guidance=guidance)
        return [net.to_uint8(net.frames_from_latent(model, z[i], 17)) for i in range(len(prompts))]
    g = 128 // net.SCALE
    z = net.sample(model, prompts, (1, g, g), seeds, steps=steps, guidance=guidance)
    return list(net.to_uint8(model.decode(z[:, :, 0])))


def shape_by_size(sc, marks) -> dict:
    """Shape accuracy over the one-object scenes of each size: where small
    and large objects part (the small ones span two latent cells)."""
    out = {}
    for size in ("small", "large"):
        hits = [m["shape"] for s, m in zip(sc, marks)
                if len(s.objects) == 1 and s.objects[0].size == size]
        out[f"{size}_shape_accuracy"] = float(np.mean(hits)) if hits else None
    return out


def shape_read_as(sc, outs) -> dict:
    """{shape asked for: {shape read: count}} over each image scene's first
    object: the detection of its colour (the largest one), "none" where the
    analyser found no object of that colour."""
    out = {}
    for s, img in zip(sc, outs):
        want = s.objects[0]
        _, dets = scenes.analyse_image(img, max(2, len(s.objects)))
        same = [d for d in dets if d.colour == want.colour]
        read = same[0].shape if same else "none"
        row = out.setdefault(want.shape, {})
        row[read] = row.get(read, 0) + 1
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--split", choices=["heldout", "train"], default="heldout")
    ap.add_argument("--guidance", type=float, default=4.0)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--videos", action="store_true", help="score videos")
    ap.add_argument("--weights", default=golden.WEIGHTS)
    ap.add_argument("--grid", default="")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.prompts < 1 or args.prompts > 10000:
        ap.error("--prompts: 1..10000")
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    sc = [scenes.random_scene(rng, args.split, video=args.videos) for _ in range(args.prompts)]
    prompts = [s.caption() for s in sc]
    outs = []
    model = golden.load(args.weights)
    for start in range(0, len(prompts), 16):
        outs += generate_torch(model, prompts[start:start + 16],
                               list(range(start, min(start + 16, len(prompts)))),
                               args.guidance, args.steps, args.videos)
    marks = [scenes.score(s, o) for s, o in zip(sc, outs)]
    result = {f"{k}_accuracy": float(np.mean([m[k] for m in marks])) for k in marks[0]}
    if not args.videos:
        result.update(shape_by_size(sc, marks))
        result["shape_read_as"] = shape_read_as(sc, outs)
    result["samples"] = len(marks)
    result["split"] = args.split
    result["guidance"] = args.guidance
    if args.grid:
        shown = [o[len(o) // 2] if args.videos else o for o in outs[:16]]
        with open(args.grid, "wb") as f:
            f.write(png.encode(png.grid(shown, 8)))
        for i, p in enumerate(prompts[:16]):
            print(f"grid {i}: {p}", file=sys.stderr)
    print(json.dumps(result) if args.json else
          "\n".join(f"{k} {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
