"""Trains the reference model from a seed on the CPU and writes its weights.

    /usr/bin/python3 -m sluice_model.train --out models/sluice-reference.safetensors

(from python/). Phase 1 trains the VAE (encoder and decoder) on rendered
scenes; its latents are then standardized per channel (folded into the
first decoder and last encoder convolution) and the preview map is fitted.
Phase 2 encodes a fixed set of scenes and trains the text encoder and the
denoiser on them: flow matching with the clean latent as the target,
noise levels half uniform in (0, 1], half logit-normal, a quarter of them
then set to 1 (--layout-share), object cells and the cells where the
objects' shapes differ weighted up (--shape-weight), the caption dropped
for 10% of samples (classifier-free guidance), an exponential moving
average of the weights exported. The defaults are the shipped weights'
recipe. Every line of the loss curve is printed and written to
--curve (CSV: phase, step, loss). Same seed, same thread count and the
same torch build: the same weights.

--vae-out FILE also writes the weights after phase 1 (with the random
generator's state); --vae-from FILE starts from them and skips phase 1
(same seed and VAE arguments, checked): the weights written are the same
bytes, so denoiser experiments need not train the VAE again.
--eval-every N prints held-out scores of the moving average while the
denoiser trains. --vae-crop PX trains the VAE on PX-pixel windows around
objects instead of whole pictures, and --vae-decoder-blocks N adds
residual blocks after the decoder's first N stages (neither is the
shipped recipe yet).
"""

import argparse
import copy
import hashlib
import json
import math
import sys
import time

import numpy as np
import torch

from . import net, safetensors, scenes

SIZE = 128
FRAMES = 17


def log(msg: str) -> None:
    print(msg, flush=True)


def to_tensor(imgs: np.ndarray) -> torch.Tensor:
    """uint8 [B, H, W, 3] -> float [B, 3, H, W] in [-1, 1]."""
    return torch.from_numpy(imgs).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def vae_batch(rng: np.random.Generator, n: int) -> np.ndarray:
    """Images and single video frames (objects anywhere along their path)."""
    out = []
    for _ in range(n):
        if rng.uniform() < 0.3:
            sc = scenes.random_scene(rng, "train", video=True)
            out.append(scenes.render(sc, SIZE, int(rng.integers(FRAMES)), FRAMES))
        else:
            out.append(scenes.render(scenes.random_scene(rng, "train"), SIZE))
    return np.stack(out)


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(total - warmup, 1)))


def object_pixels(imgs: np.ndarray) -> np.ndarray:
    """bool [B, H, W]: where a pixel differs from its picture's corner (the
    background: objects never reach a corner)."""
    return np.any(imgs != imgs[:, :1, :1, :], axis=3)


def object_mask(imgs: np.ndarray) -> torch.Tensor:
    """object_pixels as a float tensor [B, 1, H, W]."""
    return torch.from_numpy(object_pixels(imgs).astype(np.float32))[:, None]


def object_crops(rng: np.random.Generator, imgs: np.ndarray, size: int) -> np.ndarray:
    """A size x size window (on an 8-pixel grid) of each picture
    around one of its object pixels, drawn at random, at a random offset
    (at least 16 pixels of margin where the picture allows): objects cover a
    few percent of a picture, so crops put several times more object edges
    into the same compute. Pictures without an object are cropped at their
    centre."""
    out = []
    for img, m in zip(imgs, object_pixels(imgs)):
        ys, xs = np.nonzero(m)
        if len(ys):
            k = rng.integers(len(ys))
            cy, cx = int(ys[k]), int(xs[k])
        else:
            cy = cx = SIZE // 2
        y0 = int(np.clip((cy - rng.integers(16, size - 16)) // 8 * 8, 0, SIZE - size))
        x0 = int(np.clip((cx - rng.integers(16, size - 16)) // 8 * 8, 0, SIZE - size))
        out.append(img[y0:y0 + size, x0:x0 + size])
    return np.stack(out)


def train_vae(model: net.Model, rng, steps: int, batch: int, curve,
              object_weight: float = 1.0, noise: float = 0.05, crop: int = 0) -> None:
    names = [n for n in net.shapes(model.decoder_blocks) if n.startswith("vae.")]
    params = [model.w[n] for n in names]
    opt = torch.optim.Adam(params, lr=2e-3)
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, 2e-3, 50)
        imgs = vae_batch(rng, batch)
        if crop:
            imgs = object_crops(rng, imgs, crop)
        x = to_tensor(imgs)
        z = model.encode(x)
        # A Gaussian posterior of fixed deviation `noise` and its KL's mean
        # term: the decoder learns to draw the same picture from anywhere
        # near a latent (a denoiser's small errors stay small).
        noisy = z + noise * torch.randn_like(z)
        rec = model.decode(noisy)
        mse = torch.mean((rec - x) ** 2)
        if object_weight == 1.0:  # The loss the first version-2 weights had, as computed.
            loss = mse + torch.mean(torch.abs(rec - x)) + 1e-4 * torch.mean(z ** 2)
        else:
            # Objects cover a few percent of a picture: their pixels (and a
            # pixel's worth of edge around them) weigh `object_weight` times
            # the background's, or the decoder learns blobs.
            weight = 1 + (object_weight - 1) * torch.nn.functional.max_pool2d(
                object_mask(imgs), 3, stride=1, padding=1)
            err = rec - x
            loss = (torch.mean(weight * (err ** 2 + torch.abs(err))) / torch.mean(weight)
                    + 1e-4 * torch.mean(z ** 2))
        opt.zero_grad()
        loss.backward()
        opt.step()
        curve.append(("vae", step, float(mse)))
        if step % 25 == 0 or step == steps - 1:
            log(f"vae step {step} mse {float(mse):.5f} ({time.time() - t0:.0f} s)")


@torch.no_grad()
def standardize_latents(model: net.Model, rng, n: int) -> None:
    """Folds each latent channel's mean and deviation into the encoder's last
    and the decoder's first convolution, so latents are about N(0, 1)."""
    w = model.w
    z = torch.cat([model.encode(to_tensor(vae_batch(rng, 32))) for _ in range(n // 32)])
    mean = z.mean(dim=(0, 2, 3))
    std = z.std(dim=(0, 2, 3)) + 1e-6
    last = len(net.ENC_CHANNELS) - 1
    w[f"vae.enc.{last}.w"].mul_(1 / std[:, None, None, None])
    w[f"vae.enc.{last}.b"].sub_(mean).div_(std)
    dec_w = w["vae.dec.0.w"]
    w["vae.dec.0.b"].add_(torch.einsum("oikl,i->o", dec_w, mean))
    dec_w.mul_(std[None, :, None, None])


@torch.no_grad()
def fit_preview(model: net.Model, rng, n: int) -> float:
    """Least squares latent cell -> mean RGB of its 8x8 pixels; returns the
    fit's RMS error in [-1, 1] units."""
    xs, ys = [], []
    for _ in range(n // 32):
        x = to_tensor(vae_batch(rng, 32))
        z = model.encode(x)
        xs.append(z.permute(0, 2, 3, 1).reshape(-1, net.LATENT))
        ys.append(torch.nn.functional.avg_pool2d(x, net.SCALE).permute(0, 2, 3, 1).reshape(-1, 3))
    a = torch.cat(xs).double()
    b = torch.cat(ys).double()
    a1 = torch.cat([a, torch.ones(a.shape[0], 1, dtype=a.dtype)], dim=1)
    sol = torch.linalg.lstsq(a1, b).solution
    model.w["preview.rgb"].copy_(sol[:-1].float())
    model.w["preview.rgb_b"].copy_(sol[-1].float())
    return float(torch.sqrt(torch.mean((a1 @ sol - b) ** 2)))


def shape_cells(scene: scenes.Scene, size: int = SIZE, frame: int = 0,
                frames: int = 1) -> np.ndarray:
    """float32 [size/4, size/4]: where the picture (frame `frame` of
    `frames` of a video) would change if its objects took other shapes —
    per latent cell, the share of its pixels inside some but not all of the
    four shapes' masks of an object, scaled so the largest is 1 (all 0 when
    no pixel differs)."""
    offset = (0.0, 0.0)
    if scene.direction is not None:
        ux, uy = scenes.DIRECTIONS[scene.direction]
        a = -scenes.TRAVEL + 2 * scenes.TRAVEL * (frame / max(frames - 1, 1))
        offset = (ux * a, uy * a)
    diff = np.zeros((size, size), np.float32)
    for o in scene.objects:
        cx, cy = scenes._centre(o, size, offset)
        masks = np.stack([scenes.shape_mask(sh, cx, cy, scenes.SIZES[o.size] * size, size)
                          for sh in scenes.SHAPES])
        diff += masks.any(axis=0) & ~masks.all(axis=0)
    k = net.SCALE
    cells = diff.reshape(size // k, k, size // k, k).mean(axis=(1, 3))
    top = cells.max()
    return cells / top if top > 0 else cells


@torch.no_grad()
def build_dataset(model: net.Model, rng, images: int, videos: int):
    """(image latents [N, 4, 1, 32, 32], captions, shape cells [N, 1, 1,
    32, 32] (shape_cells)), (video latents [M, 4, 5, 32, 32], captions):
    latent frame k of a video is frame 4k encoded."""
    img_caps, img_lat, img_shape = [], [], []
    for start in range(0, images, 64):
        sc = [scenes.random_scene(rng, "train") for _ in range(min(64, images - start))]
        img_caps += [s.caption() for s in sc]
        img_lat.append(model.encode(to_tensor(np.stack([scenes.render(s, SIZE) for s in sc]))))
        img_shape.append(torch.from_numpy(np.stack([shape_cells(s) for s in sc])))
    vid_caps, vid_lat, vid_shape = [], [], []
    for start in range(0, videos, 16):
        sc = [scenes.random_scene(rng, "train", video=True) for _ in range(min(16, videos - start))]
        vid_caps += [s.caption() for s in sc]
        frames = np.stack([scenes.render(s, SIZE, f, FRAMES) for s in sc for f in range(0, FRAMES, 4)])
        z = model.encode(to_tensor(frames))  # [B*5, 4, 32, 32]
        vid_lat.append(z.view(len(sc), 5, *z.shape[1:]).permute(0, 2, 1, 3, 4))
        vid_shape.append(torch.from_numpy(np.stack(
            [np.stack([shape_cells(s, SIZE, f, FRAMES) for f in range(0, FRAMES, 4)])
             for s in sc])))
    return ((torch.cat(img_lat)[:, :, None], img_caps, torch.cat(img_shape)[:, None, None]),
            (torch.cat(vid_lat), vid_caps, torch.cat(vid_shape)[:, None]))


def drop_words(caption: str, rng, p: float) -> str:
    """`caption` with each object's colour word and shape word left out,
    each with chance p (the background's colour stays): the denoiser
    learns what "triangle" draws apart from the colours it came with."""
    words = caption.split()
    keep = [True] * len(words)
    for k, word in enumerate(words):
        if word in scenes.SHAPES:
            if k > 0 and words[k - 1] in scenes.COLOURS and rng.uniform() < p:
                keep[k - 1] = False
            if rng.uniform() < p:
                keep[k] = False
    return " ".join(w for w, kept in zip(words, keep) if kept)


def train_denoiser(model: net.Model, data, rng, steps: int, batch: int, video_every: int,
                   video_batch: int, curve, ema_decay: float, eval_every: int = 0,
                   shape_weight: float = 0.0, layout_share: float = 0.0,
                   word_dropout: float = 0.0, video_shape: bool = False) -> net.Weights:
    names = [n for n in net.shapes() if n.startswith(("text.", "dit."))]
    params = [model.w[n] for n in names]
    opt = torch.optim.AdamW(params, lr=1.5e-3, weight_decay=0.0, betas=(0.9, 0.99))
    ema = copy.deepcopy(model.w)
    for p in ema.parameters():
        p.requires_grad_(False)
    (img_lat, img_caps, img_shape), (vid_lat, vid_caps, vid_shape) = data
    t0 = time.time()
    avg = None
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, 1.5e-3, 100)
        video = video_every > 0 and step % video_every == video_every - 1
        lat, caps, bsz = (vid_lat, vid_caps, video_batch) if video else (img_lat, img_caps, batch)
        idx = rng.integers(0, lat.shape[0], bsz)
        x0 = lat[idx]
        texts = [caps[i] if rng.uniform() >= 0.1 else "" for i in idx]
        if word_dropout > 0:
            texts = [drop_words(t, rng, word_dropout) for t in texts]
        # Half uniform, half logit-normal (mid noise levels, where layout forms).
        u = np.where(rng.uniform(size=bsz) < 0.5, rng.uniform(size=bsz),
                     1 / (1 + np.exp(-rng.standard_normal(bsz))))
        if layout_share > 0:
            # And a share at pure noise, where the caption alone sets the
            # picture's layout and shapes (the sampler's first step).
            u = np.where(rng.uniform(size=bsz) < layout_share, 1.0, u)
        sigma = torch.from_numpy(u.astype(np.float32)).clamp_min(1e-3)
        eps = torch.from_numpy(rng.standard_normal(x0.shape).astype(np.float32))
        s = sigma.view(-1, 1, 1, 1, 1)
        xt = (1 - s) * x0 + s * eps
        pred = model.denoise(xt, sigma, model.encode_text(texts))
        # Cells that differ from the sample's background (its median cell)
        # weigh 4x: objects are a small part of each latent.
        bg = x0.flatten(2).median(dim=2).values[:, :, None, None, None]
        obj = ((x0 - bg).abs().mean(dim=1, keepdim=True) > 0.5).float()
        if shape_weight == 0.0:
            loss = torch.mean((1 + 3 * obj) * (pred - x0) ** 2)
        else:
            # Besides, an image's cells where its objects' shapes differ
            # weigh shape_weight x shape_cells more (a blob of the right
            # colour in the right place does not meet them); normalized.
            weight = 1 + 3 * obj
            if not video:
                weight = weight + shape_weight * img_shape[idx]
            elif video_shape:
                weight = weight + shape_weight * vid_shape[idx]
            loss = torch.mean(weight * (pred - x0) ** 2) / torch.mean(weight)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        with torch.no_grad():
            decay = min(ema_decay, (1 + step) / (10 + step))
            for n in names:
                ema[n].mul_(decay).add_(model.w[n].detach(), alpha=1 - decay)
        curve.append(("video" if video else "denoise", step, float(loss)))
        avg = float(loss) if avg is None else 0.98 * avg + 0.02 * float(loss)
        if step % 50 == 0 or step == steps - 1:
            log(f"denoise step {step} loss {float(loss):.4f} avg {avg:.4f} "
                f"({time.time() - t0:.0f} s)")
        if eval_every and step % eval_every == eval_every - 1 and step != steps - 1:
            # The moving average's held-out scores so far (no training state
            # is touched: the run's weights do not depend on it).
            now = net.Model(ema, position_scale=model.position_scale,
                            decoder_blocks=model.decoder_blocks)
            log(f"denoise step {step} heldout: {quick_eval(now, 32, 7, 4.0, 'heldout')}")
    for n in net.shapes(model.decoder_blocks):
        if not n.startswith(("text.", "dit.")):
            ema[n].data.copy_(model.w[n].detach())
    return ema


@torch.no_grad()
def vae_eval(model: net.Model, n: int, seed: int) -> dict:
    """The analyser's scores of held-out scenes through encode -> decode:
    what any denoiser on these latents can reach at best."""
    rng = np.random.default_rng(seed)
    sc = [scenes.random_scene(rng, "heldout") for _ in range(n)]
    x = to_tensor(np.stack([scenes.render(s, SIZE) for s in sc]))
    imgs = net.to_uint8(model.decode(model.encode(x)))
    marks = [scenes.score(s, im) for s, im in zip(sc, imgs)]
    return {k: float(np.mean([m[k] for m in marks])) for k in marks[0]}


@torch.no_grad()
def quick_eval(model: net.Model, n: int, seed: int, guidance: float, split: str) -> dict:
    rng = np.random.default_rng(seed)
    sc = [scenes.random_scene(rng, split) for _ in range(n)]
    g = SIZE // net.SCALE
    z = net.sample(model, [s.caption() for s in sc], (1, g, g), range(n), guidance=guidance)
    imgs = net.to_uint8(model.decode(z[:, :, 0]))
    marks = [scenes.score(s, im) for s, im in zip(sc, imgs)]
    return {k: float(np.mean([m[k] for m in marks])) for k in marks[0]}


def recorded_args(argv) -> str:
    """The command line the weights record, without the flags that do not
    change them (--vae-from, --vae-out, --eval-every and their values): a
    run resumed with --vae-from writes the same bytes as the full one."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in ("--vae-from", "--vae-out", "--eval-every"):
            skip = "=" not in a
            continue
        out.append(a)
    return " ".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--curve", default="")
    ap.add_argument("--seed", type=int, default=20261203)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vae-steps", type=int, default=2000)
    ap.add_argument("--vae-batch", type=int, default=32)
    ap.add_argument("--vae-noise", type=float, default=0.2,
                    help="deviation of the VAE's posterior noise around each latent")
    ap.add_argument("--vae-object-weight", type=float, default=10.0,
                    help="weight of object pixels in the VAE loss (1: the loss of version 2's "
                         "first weights)")
    ap.add_argument("--vae-crop", type=int, default=64,
                    help="train the VAE on windows of this many pixels a side around objects "
                         "(a multiple of 8 in [48, 128]; 0: whole pictures)")
    ap.add_argument("--vae-decoder-blocks", type=int, default=3,
                    help=f"residual blocks after this many of the VAE decoder's first stages "
                         f"(0..{net.MAX_DECODER_BLOCKS}; written to the weights' metadata)")
    ap.add_argument("--images", type=int, default=8000)
    ap.add_argument("--videos", type=int, default=1500)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--video-every", type=int, default=3)
    ap.add_argument("--video-batch", type=int, default=12)
    ap.add_argument("--ema", type=float, default=0.998)
    ap.add_argument("--shape-weight", type=float, default=20.0,
                    help="extra loss weight of the latent cells where an image's objects' "
                         "shapes differ (0: none)")
    ap.add_argument("--layout-share", type=float, default=0.25,
                    help="share of denoiser samples at noise level 1 (pure noise: the caption "
                         "alone decides the layout), in [0, 1)")
    ap.add_argument("--video-shape", action="store_true",
                    help="weigh videos' shape cells by --shape-weight too (else images only)")
    ap.add_argument("--word-dropout", type=float, default=0.0,
                    help="chance of leaving each object's colour word, and its shape word, out "
                         "of a training caption, in [0, 0.5]")
    ap.add_argument("--position-scale", type=float, default=2.0,
                    help="the denoiser's token positions: sinusoids of this times (t, i, j), "
                         "in (0, 4] (written to the weights' metadata)")
    ap.add_argument("--vae-eval", type=int, default=96,
                    help="score the VAE's encode -> decode of this many held-out scenes after "
                         "phase 1 (0: skip)")
    ap.add_argument("--eval", type=int, default=64)
    ap.add_argument("--eval-every", type=int, default=0,
                    help="score 32 held-out prompts every N denoiser steps (0: at the end only)")
    ap.add_argument("--vae-out", default="",
                    help="also write the weights after phase 1 (the VAE and preview map)")
    ap.add_argument("--vae-from", default="",
                    help="skip phase 1: its weights from --vae-out of a run with the same seed "
                         "and VAE arguments (the result is the same as a full run's)")
    args = ap.parse_args(argv)
    if not 0.0 <= args.shape_weight < math.inf:
        ap.error(f"--shape-weight: {args.shape_weight} is not a finite number >= 0")
    if not 0.0 <= args.layout_share < 1.0:
        ap.error(f"--layout-share: {args.layout_share} is not in [0, 1)")
    if args.vae_crop and not (48 <= args.vae_crop <= SIZE and args.vae_crop % 8 == 0):
        ap.error(f"--vae-crop: {args.vae_crop} is not 0 or a multiple of 8 in [48, {SIZE}]")
    if not 0 <= args.vae_decoder_blocks <= net.MAX_DECODER_BLOCKS:
        ap.error(f"--vae-decoder-blocks: {args.vae_decoder_blocks} is not in "
                 f"[0, {net.MAX_DECODER_BLOCKS}]")
    if args.vae_eval < 0:
        ap.error(f"--vae-eval: {args.vae_eval} is negative")
    if not 0.0 <= args.word_dropout <= 0.5:
        ap.error(f"--word-dropout: {args.word_dropout} is not in [0, 0.5]")
    if not 0.0 < args.position_scale <= 4.0:
        ap.error(f"--position-scale: {args.position_scale} is not in (0, 4]")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    start = time.time()
    blocks = args.vae_decoder_blocks
    w = net.Weights(net.init_weights(args.seed, blocks))
    model = net.Model(w, position_scale=args.position_scale, decoder_blocks=blocks)
    curve = []
    vae_args = (f"seed {args.seed} vae-steps {args.vae_steps} vae-batch {args.vae_batch} "
                f"vae-object-weight {args.vae_object_weight}"
                + (f" vae-noise {args.vae_noise}" if args.vae_noise != 0.05 else "")
                + (f" vae-crop {args.vae_crop}" if args.vae_crop else "")
                + (f" vae-decoder-blocks {blocks}" if blocks else ""))
    if args.vae_from:
        tensors, meta = safetensors.load(args.vae_from)
        if meta.get("vae_args") != vae_args:
            log(f"--vae-from {args.vae_from}: phase 1 of '{meta.get('vae_args')}', "
                f"not of '{vae_args}'")
            return 2
        for n in net.shapes(blocks):
            if n.startswith(("vae.", "preview.")):
                w[n].data.copy_(torch.from_numpy(tensors[n]))
        rng.bit_generator.state = json.loads(meta["rng_state"])
        for p in w.parameters():
            p.requires_grad_(False)
    else:
        train_vae(model, rng, args.vae_steps, args.vae_batch, curve, args.vae_object_weight,
                  args.vae_noise, args.vae_crop)
        for p in w.parameters():
            p.requires_grad_(False)
        standardize_latents(model, rng, 512)
        if args.vae_eval:
            log(f"vae heldout encode->decode: {vae_eval(model, args.vae_eval, 7)}")
        log(f"preview fit rms {fit_preview(model, rng, 256):.4f}")
        if args.vae_out:
            # With the generator's state: phase 2 goes on drawing where
            # phase 1 stopped, whichever way phase 1 came.
            safetensors.save(args.vae_out, w.export(),
                             {"format": net.FORMAT, "version": net.VERSION,
                              "vocabulary": " ".join(scenes.VOCABULARY), "vae_args": vae_args,
                              "rng_state": json.dumps(rng.bit_generator.state)})
    t = time.time()
    data = build_dataset(model, rng, args.images, args.videos)
    log(f"dataset: {args.images} images, {args.videos} videos encoded ({time.time() - t:.0f} s)")
    for n in net.shapes(blocks):
        w[n].requires_grad_(n.startswith(("text.", "dit.")))
    ema = train_denoiser(model, data, rng, args.steps, args.batch, args.video_every,
                         args.video_batch, curve, args.ema, args.eval_every, args.shape_weight,
                         args.layout_share, args.word_dropout, args.video_shape)
    final = net.Model(ema, position_scale=args.position_scale, decoder_blocks=blocks)
    tensors = ema.export()
    meta = {"format": net.FORMAT, "version": net.VERSION,
            "vocabulary": " ".join(scenes.VOCABULARY), "seed": str(args.seed),
            "train_args": recorded_args(sys.argv[1:] if argv is None else argv)}
    if args.position_scale != net.DEFAULT_POSITION_SCALE:
        meta["position_scale"] = repr(args.position_scale)
    if blocks:
        meta["decoder_blocks"] = str(blocks)
    safetensors.save(args.out, tensors, meta)
    if args.curve:
        with open(args.curve, "w") as f:
            f.write("phase,step,loss\n")
            for phase, step, loss in curve:
                f.write(f"{phase},{step},{loss:.6f}\n")
    digest = hashlib.sha256(open(args.out, "rb").read()).hexdigest()
    log(f"wrote {args.out} sha256 {digest} after {time.time() - start:.0f} s")
    if args.eval:
        for g in (4.0, 1.0):
            log(f"heldout guidance {g}: {quick_eval(final, args.eval, 7, g, 'heldout')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
