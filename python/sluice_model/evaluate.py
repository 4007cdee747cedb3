"""Prompt adherence of the reference model, scored by the scene analyser.

    cd python && /usr/bin/python3 -m sluice_model.evaluate --prompts 96 --split heldout --json
    ... --server http://127.0.0.1:8000   (images through a running sluice server)

Draws --prompts scenes of the split (seed --seed), generates each (seed =
its index) with the PyTorch mirror, or through a running server's
/v1/images/generations, scores it (scenes.score) and prints the mean of
each attribute: color_accuracy, shape_accuracy, position_accuracy,
background_accuracy, and for --videos direction_accuracy, with samples.
--grid writes a PNG of the first 16 outputs (the prompts go to stdout).
"""

import argparse
import base64
import json
import sys
import subprocess
import urllib.request

import numpy as np
import torch

from . import golden, net, png, scenes


def _decode_png(data: bytes, size: int = 128) -> np.ndarray:
    """RGB [size, size, 3] of a PNG, through ffmpeg (a sluice dependency)."""
    out = subprocess.run(["ffmpeg", "-v", "error", "-i", "-", "-f", "rawvideo", "-pix_fmt",
                          "rgb24", "-"], input=data, capture_output=True, check=True).stdout
    return np.frombuffer(out, np.uint8).reshape(size, size, 3)


def generate_torch(model, prompts, seeds, guidance, steps, video):
    if video:
        z = net.sample(model, prompts, (5, 16, 16), seeds, steps=steps, guidance=guidance)
        return [net.to_uint8(net.frames_from_latent(model, z[i], 17)) for i in range(len(prompts))]
    z = net.sample(model, prompts, (1, 16, 16), seeds, steps=steps, guidance=guidance)
    return list(net.to_uint8(model.decode(z[:, :, 0])))


def generate_server(url, prompt, seed, guidance, steps, api_key):
    body = {"prompt": prompt, "size": "128x128", "seed": seed, "guidance": guidance}
    if steps:
        body["steps"] = steps
    req = urllib.request.Request(url.rstrip("/") + "/v1/images/generations",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    if api_key:
        req.add_header("Authorization", "Bearer " + api_key)
    with urllib.request.urlopen(req, timeout=120) as r:
        reply = json.load(r)
    return _decode_png(base64.b64decode(reply["data"][0]["b64_json"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--split", choices=["heldout", "train"], default="heldout")
    ap.add_argument("--guidance", type=float, default=4.0)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--videos", action="store_true", help="score videos (torch only)")
    ap.add_argument("--server", default="", help="a running sluice server's HTTP base URL")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--weights", default=golden.WEIGHTS)
    ap.add_argument("--grid", default="")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.prompts < 1 or args.prompts > 10000:
        ap.error("--prompts: 1..10000")
    if args.videos and args.server:
        ap.error("--videos: only with the PyTorch mirror for now")
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    sc = [scenes.random_scene(rng, args.split, video=args.videos) for _ in range(args.prompts)]
    prompts = [s.caption() for s in sc]
    outs = []
    if args.server:
        outs = [generate_server(args.server, p, i, args.guidance, args.steps, args.api_key)
                for i, p in enumerate(prompts)]
    else:
        model = golden.load(args.weights)
        for start in range(0, len(prompts), 16):
            outs += generate_torch(model, prompts[start:start + 16],
                                   list(range(start, min(start + 16, len(prompts)))),
                                   args.guidance, args.steps, args.videos)
    marks = [scenes.score(s, o) for s, o in zip(sc, outs)]
    result = {f"{k}_accuracy": float(np.mean([m[k] for m in marks])) for k in marks[0]}
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
