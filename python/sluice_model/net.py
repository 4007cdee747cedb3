"""The reference networks in PyTorch: the mirror of sluice's C++ reference
stages (src/runtime/reference/models.cc). The same weights give the same
numbers in both, up to float32 rounding: every layer here is the C++ one
written with torch ops, weights in the C++ layout (a linear layer's weight
is [in, out] and computes x @ w + b; a 3x3 convolution's is [out, in, 3, 3]).

  TextEncoder  word tokens (scenes.tokenize) -> [64, 64]: embedding plus
               sinusoidal positions, two pre-norm transformer layers (4
               heads, keys past the prompt masked), a final layer norm.
  Denoiser     latent [4, t, h, w] -> the clean latent it predicts: 4x4
               patches, DIT_DEPTH blocks of width DIT_DIM (adaptive layer
               norm on the noise level, self-attention over every token,
               cross-attention to the text, MLP), a modulated output layer.
  Decoder      latent frame [4, h, w] -> RGB [3, 4h, 4w] in [-1, 1]: a
               convolution, two (nearest 2x upsampling, convolution)
               stages, an output convolution; SiLU between, tanh last.
  Encoder      RGB -> latent (training and image edits): convolutions with
               stride 2, 2.
  Preview      latent -> RGB per latent cell, a linear map fitted on the
               training set.

Layer norms have no affine parameters and eps 1e-6; GELU is the tanh form.
"""

import math
from typing import Dict, List, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from . import scenes

TEXT_LEN, TEXT_DIM, TEXT_LAYERS, TEXT_HEADS, VOCAB_ROWS = 64, 64, 2, 4, 256
LATENT, PATCH = 4, 4
SCALE = 4  # Pixels per latent cell, each axis.
DIT_DIM, DIT_DEPTH, DIT_HEADS = 96, 3, 4
DEC_CHANNELS = [(LATENT, 64), (64, 32), (32, 16), (16, 3)]
ENC_CHANNELS = [(3, 16, 1), (16, 32, 2), (32, 64, 2), (64, LATENT, 1)]
FORMAT = "sluice-reference"
VERSION = "2"
# The token positions' scale when the weights' metadata names none (the
# "position_scale" entry): sinusoids of 0.25 t, 0.25 i, 0.25 j.
DEFAULT_POSITION_SCALE = 0.25
# Residual blocks after at most this many of the VAE decoder's stages
# (the weights' "decoder_blocks" metadata; absent: none).
MAX_DECODER_BLOCKS = 3


def sinusoidal(value: torch.Tensor, dim: int) -> torch.Tensor:
    """[..., dim]: sin then cos of value at frequencies exp(-ln(1e4) i / half)."""
    half = dim // 2
    i = torch.arange(half, dtype=torch.float64)
    freq = torch.exp(-math.log(10000.0) * i / half)
    arg = value.to(torch.float64)[..., None] * freq
    return torch.cat([torch.sin(arg), torch.cos(arg)], dim=-1).to(torch.float32)


def layer_norm(x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), eps=1e-6)


def attention(q, k, v, heads: int, key_len=None):
    """q [B, nq, d], k/v [B, nk, d]; keys at index >= key_len[b] masked."""
    b, nq, d = q.shape
    nk = k.shape[1]
    dh = d // heads
    q = q.view(b, nq, heads, dh).transpose(1, 2)
    k = k.view(b, nk, heads, dh).transpose(1, 2)
    v = v.view(b, nk, heads, dh).transpose(1, 2)
    s = (q * (1.0 / math.sqrt(dh))) @ k.transpose(-1, -2)
    if key_len is not None:
        mask = torch.arange(nk)[None, :] >= key_len[:, None]
        s = s.masked_fill(mask[:, None, None, :], float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, nq, d)


class Weights(torch.nn.Module):
    """Every tensor of the model by its file name (dots become '__')."""

    def __init__(self, tensors: Dict[str, np.ndarray]):
        super().__init__()
        for name, a in tensors.items():
            self.register_parameter(name.replace(".", "__"),
                                    torch.nn.Parameter(torch.tensor(np.asarray(a, np.float32))))

    def __getitem__(self, name: str) -> torch.nn.Parameter:
        return getattr(self, name.replace(".", "__"))

    def export(self) -> Dict[str, np.ndarray]:
        return {n.replace("__", "."): p.detach().cpu().numpy() for n, p in self.named_parameters()}


def shapes(decoder_blocks: int = 0) -> Dict[str, Sequence[int]]:
    """Every tensor's name and shape: the architecture the C++ loader checks.
    `decoder_blocks` (the weights' "decoder_blocks" metadata): residual
    blocks after that many of the VAE decoder's first stages."""
    d, td = DIT_DIM, TEXT_DIM
    out = {"text.embed": (VOCAB_ROWS, td)}
    for l in range(TEXT_LAYERS):
        p = f"text.layers.{l}."
        out.update({p + "qkv": (td, 3 * td), p + "qkv_b": (3 * td,), p + "proj": (td, td),
                    p + "proj_b": (td,), p + "fc1": (td, 4 * td), p + "fc1_b": (4 * td,),
                    p + "fc2": (4 * td, td), p + "fc2_b": (td,)})
    pin = LATENT * PATCH * PATCH
    out.update({"dit.patch": (pin, d), "dit.patch_b": (d,), "dit.t1": (64, d), "dit.t1_b": (d,),
                "dit.t2": (d, d), "dit.t2_b": (d,), "dit.final_ada": (d, 2 * d),
                "dit.final_ada_b": (2 * d,), "dit.out": (d, pin), "dit.out_b": (pin,)})
    for b in range(DIT_DEPTH):
        p = f"dit.blocks.{b}."
        out.update({p + "ada": (d, 6 * d), p + "ada_b": (6 * d,), p + "qkv": (d, 3 * d),
                    p + "qkv_b": (3 * d,), p + "proj": (d, d), p + "proj_b": (d,),
                    p + "xq": (d, d), p + "xkv": (td, 2 * d), p + "xproj": (d, d),
                    p + "fc1": (d, 4 * d), p + "fc1_b": (4 * d,), p + "fc2": (4 * d, d),
                    p + "fc2_b": (d,)})
    for i, (cin, cout) in enumerate(DEC_CHANNELS):
        out.update({f"vae.dec.{i}.w": (cout, cin, 3, 3), f"vae.dec.{i}.b": (cout,)})
    for i, (cin, cout, _) in enumerate(ENC_CHANNELS):
        out.update({f"vae.enc.{i}.w": (cout, cin, 3, 3), f"vae.enc.{i}.b": (cout,)})
    out.update({"preview.rgb": (LATENT, 3), "preview.rgb_b": (3,)})
    for i in range(decoder_blocks):
        c = DEC_CHANNELS[i][1]
        for part in ("a", "b"):
            out.update({f"vae.dec.res{i}.{part}.w": (c, c, 3, 3), f"vae.dec.res{i}.{part}.b": (c,)})
    return out


def decoder_blocks_of(meta: Dict[str, str]) -> int:
    """The "decoder_blocks" a weights file's metadata names (an integer in
    [0, MAX_DECODER_BLOCKS]), 0 when it names none."""
    text = meta.get("decoder_blocks")
    if text is None:
        return 0
    if not text.isdigit() or int(text) > MAX_DECODER_BLOCKS:
        raise ValueError(f"metadata decoder_blocks: {text!r} is not an integer in "
                         f"[0, {MAX_DECODER_BLOCKS}]")
    return int(text)


def position_scale_of(meta: Dict[str, str]) -> float:
    """The "position_scale" a weights file's metadata names (a decimal in
    (0, 4]), DEFAULT_POSITION_SCALE when it names none."""
    text = meta.get("position_scale")
    if text is None:
        return DEFAULT_POSITION_SCALE
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"metadata position_scale: {text!r} is not a number") from None
    if not (0.0 < value <= 4.0):
        raise ValueError(f"metadata position_scale: {text!r} is not in (0, 4]")
    return value


def init_weights(seed: int, decoder_blocks: int = 0) -> Dict[str, np.ndarray]:
    """Training's starting point: fan-in scaled normals, zero biases, and
    zero gates and output layer (each DiT block starts as the identity).
    Decoder blocks draw from a generator of their own (the other tensors
    are the same with or without them) and start as the identity (their
    second convolution is zero)."""
    rng = np.random.default_rng(seed)
    out = {}
    base = shapes()
    for name, shape in base.items():
        if name.endswith("_b") or name.endswith(".b") or name in ("dit.out", "preview.rgb"):
            out[name] = np.zeros(shape, np.float32)
        elif name.endswith(".ada") or name == "dit.final_ada":
            out[name] = np.zeros(shape, np.float32)
        elif name == "text.embed":
            out[name] = rng.normal(0, 1.0, shape).astype(np.float32)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) == 4 else shape[0]
            out[name] = (rng.normal(0, 1.0, shape) / math.sqrt(fan_in)).astype(np.float32)
    blocks = np.random.default_rng([seed, 1])
    for name, shape in shapes(decoder_blocks).items():
        if name in base:
            continue
        if name.endswith(".a.w"):
            fan_in = int(np.prod(shape[1:]))
            out[name] = (blocks.normal(0, 1.0, shape) * math.sqrt(2.0 / fan_in)).astype(np.float32)
        else:
            out[name] = np.zeros(shape, np.float32)
    return out


# --- adapters (LoRA) -----------------------------------------------------------
# An adapter is a safetensors file of low-rank updates to the denoiser's
# block layers: for layer L of block b (L one of ADAPTED_LAYERS),
# dit.blocks.b.L.lora_a [in, rank] and dit.blocks.b.L.lora_b [rank, out];
# metadata "format" ADAPTER_FORMAT, "version", "base" (the weights' format
# and version it was trained on), "rank", "name". A request's scale
# multiplies the update (1: as trained). The C++ reference::Adapter loads
# the same files.
ADAPTER_FORMAT = "sluice-lora"
ADAPTER_VERSION = "1"
ADAPTED_LAYERS = ("qkv", "proj", "xq", "xproj", "fc1", "fc2")
MAX_ADAPTER_RANK = 64
Lora = Sequence  # of (Dict[str, torch.Tensor], float): adapter tensors, scale.


def adapter_shapes(rank: int, layers: Sequence[str] = ADAPTED_LAYERS) -> Dict[str, Sequence[int]]:
    """The tensors of an adapter of `rank` on `layers` of every block."""
    base = shapes()
    out = {}
    for b in range(DIT_DEPTH):
        for layer in layers:
            name = f"dit.blocks.{b}.{layer}"
            fan_in, fan_out = base[name]
            out[name + ".lora_a"] = (fan_in, rank)
            out[name + ".lora_b"] = (rank, fan_out)
    return out


def load_adapter(path: str) -> Dict[str, torch.Tensor]:
    """An adapter file's tensors (checked against the architecture)."""
    with open(path, "rb") as f:
        return adapter_from_bytes(f.read(), path)


def adapter_from_bytes(data: bytes, where: str = "adapter") -> Dict[str, torch.Tensor]:
    """An adapter's tensors from its file's bytes; ValueError naming what
    does not fit (the format, the rank, a tensor's name or shape)."""
    from . import safetensors
    tensors, meta = safetensors.loads(data, where)
    if meta.get("format") != ADAPTER_FORMAT:
        raise ValueError(f"{where}: metadata format {meta.get('format')!r} is not "
                         f"{ADAPTER_FORMAT!r}")
    rank_text = meta.get("rank", "")
    if not rank_text.isdigit() or not 1 <= int(rank_text) <= MAX_ADAPTER_RANK:
        raise ValueError(f"{where}: metadata rank {rank_text!r} is not in 1..{MAX_ADAPTER_RANK}")
    allowed = adapter_shapes(int(rank_text))
    for name, a in tensors.items():
        if tuple(allowed.get(name, ())) != tuple(a.shape):
            raise ValueError(f"{where}: tensor {name} {list(a.shape)} is not an adapter tensor "
                             f"of rank {rank_text}")
    return {n: torch.tensor(np.asarray(a, np.float32)) for n, a in tensors.items()}


class Model:
    """The four networks over one Weights. `position_scale`: the denoiser's
    token positions are sinusoids of position_scale * (t, i, j); the
    weights' "position_scale" metadata, DEFAULT_POSITION_SCALE without it."""

    def __init__(self, w: Weights, vocabulary: Sequence[str] = scenes.VOCABULARY,
                 position_scale: float = DEFAULT_POSITION_SCALE, decoder_blocks: int = 0):
        self.w = w
        self.vocabulary = list(vocabulary)
        self.position_scale = float(position_scale)
        self.decoder_blocks = int(decoder_blocks)

    # --- text ---------------------------------------------------------------
    def tokens(self, texts: Sequence[str]) -> torch.Tensor:
        return torch.tensor([scenes.tokenize(t, self.vocabulary, TEXT_LEN, VOCAB_ROWS)
                             for t in texts])

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        """[B, 64, 64]."""
        w = self.w
        ids = self.tokens(texts)
        lens = (ids != 0).sum(dim=1)
        x = w["text.embed"][ids] + sinusoidal(torch.arange(TEXT_LEN).float(), TEXT_DIM)
        for l in range(TEXT_LAYERS):
            p = f"text.layers.{l}."
            h = layer_norm(x) @ w[p + "qkv"] + w[p + "qkv_b"]
            q, k, v = h.split(TEXT_DIM, dim=-1)
            x = x + attention(q, k, v, TEXT_HEADS, lens) @ w[p + "proj"] + w[p + "proj_b"]
            h = F.gelu(layer_norm(x) @ w[p + "fc1"] + w[p + "fc1_b"], approximate="tanh")
            x = x + h @ w[p + "fc2"] + w[p + "fc2_b"]
        return layer_norm(x)

    # --- denoiser -----------------------------------------------------------
    def positions(self, t: int, hp: int, wp: int) -> torch.Tensor:
        """[t*hp*wp, DIT_DIM]: 3 x sinusoids of s t, s i, s j (s: the
        position scale, computed in float32 as the C++ denoiser does)."""
        tt, ii, jj = torch.meshgrid(torch.arange(t), torch.arange(hp), torch.arange(wp),
                                    indexing="ij")
        a, b = DIT_DIM // 4, 3 * DIT_DIM // 8
        s = torch.tensor(self.position_scale, dtype=torch.float32)
        return 3.0 * torch.cat([sinusoidal(s * tt.reshape(-1).float(), a),
                                sinusoidal(s * ii.reshape(-1).float(), b),
                                sinusoidal(s * jj.reshape(-1).float(), b)], dim=-1)

    def denoise(self, x: torch.Tensor, sigma: torch.Tensor, cond: torch.Tensor,
                lora: "Lora" = ()) -> torch.Tensor:
        """The clean latent predicted from x [B, 4, t, h, w] at noise level
        sigma [B] given text [B, 64, 64]: embed, blocks, head; `lora`: the
        adapters every sample runs with (blocks)."""
        X, c2 = self.embed(x, sigma)
        return self.head(self.blocks(X, c2, cond, lora), c2, x.shape)

    # The denoiser's three parts (the C++ Denoiser's Embed, Blocks, Head):
    # a sampler with a step cache runs the blocks only on some steps.
    def embed(self, x: torch.Tensor, sigma: torch.Tensor):
        """Tokens X [B, n, DIT_DIM] of x [B, 4, t, h, w] and the timestep
        conditioning c2 [B, DIT_DIM] at sigma [B]."""
        w, p = self.w, PATCH
        bsz, c, t, h, wd = x.shape
        hp, wp = h // p, wd // p
        tok = (x.reshape(bsz, c, t, hp, p, wp, p).permute(0, 2, 3, 5, 1, 4, 6)
               .reshape(bsz, t * hp * wp, c * p * p))
        X = tok @ w["dit.patch"] + w["dit.patch_b"] + self.positions(t, hp, wp)
        c2 = F.silu(F.silu(sinusoidal(sigma * 1000.0, 64) @ w["dit.t1"] + w["dit.t1_b"])
                    @ w["dit.t2"] + w["dit.t2_b"])
        return X, c2

    def modulated_input(self, X: torch.Tensor, c2: torch.Tensor) -> torch.Tensor:
        """Block 0's modulated input of X: what a step cache compares."""
        w, d = self.w, DIT_DIM
        mod = (c2 @ w["dit.blocks.0.ada"] + w["dit.blocks.0.ada_b"])[:, None, :]
        sh1, sc1 = mod[..., :d], mod[..., d:2 * d]
        return layer_norm(X) * (1 + sc1) + sh1

    def blocks(self, X: torch.Tensor, c2: torch.Tensor, cond: torch.Tensor,
               lora: "Lora" = (), row_lora=()) -> torch.Tensor:
        """Every block over X [B, n, DIT_DIM] given text [B, 64, 64]. `lora`:
        (adapter tensors, scale) pairs; each adapted layer computes
        h @ w + sum(scale (h @ lora_a) @ lora_b) (+ its bias). `row_lora`:
        (first, end, lora) triples, each adding its adapters to samples
        [first, end) only (a batch of jobs with their own adapters)."""
        w, d = self.w, DIT_DIM

        def lin(h, q, name, bias=True):
            out = h @ w[q + name]
            for tensors, scale in lora:
                a = tensors.get(q + name + ".lora_a")
                if a is not None:
                    out = out + scale * ((h @ a) @ tensors[q + name + ".lora_b"])
            for first, end, terms in row_lora:
                for tensors, scale in terms:
                    a = tensors.get(q + name + ".lora_a")
                    if a is not None:
                        out[first:end] += scale * ((h[first:end] @ a)
                                                   @ tensors[q + name + ".lora_b"])
            return out + w[q + name + "_b"] if bias else out

        for b in range(DIT_DEPTH):
            q = f"dit.blocks.{b}."
            mod = (c2 @ w[q + "ada"] + w[q + "ada_b"])[:, None, :]
            sh1, sc1, g1, sh2, sc2, g2 = mod.split(d, dim=-1)
            H = layer_norm(X) * (1 + sc1) + sh1
            qkv = lin(H, q, "qkv")
            qq, kk, vv = qkv.split(d, dim=-1)
            X = X + g1 * lin(attention(qq, kk, vv, DIT_HEADS), q, "proj")
            kv = cond @ w[q + "xkv"]
            xk, xv = kv.split(d, dim=-1)
            X = X + lin(attention(lin(layer_norm(X), q, "xq", False), xk, xv, DIT_HEADS), q,
                        "xproj", False)
            H = layer_norm(X) * (1 + sc2) + sh2
            H = F.gelu(lin(H, q, "fc1"), approximate="tanh")
            X = X + g2 * lin(H, q, "fc2")
        return X

    def head(self, X: torch.Tensor, c2: torch.Tensor, shape) -> torch.Tensor:
        """The output layer: X [B, n, DIT_DIM] to a latent of `shape`
        [B, 4, t, h, w]."""
        w, d, p = self.w, DIT_DIM, PATCH
        bsz, c, t, h, wd = shape
        hp, wp = h // p, wd // p
        mod = (c2 @ w["dit.final_ada"] + w["dit.final_ada_b"])[:, None, :]
        shift, scale = mod.split(d, dim=-1)
        out = (layer_norm(X) * (1 + scale) + shift) @ w["dit.out"] + w["dit.out_b"]
        return (out.reshape(bsz, t, hp, wp, c, p, p).permute(0, 4, 1, 2, 5, 3, 6)
                .reshape(bsz, c, t, h, wd))

    # --- VAE ----------------------------------------------------------------
    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """[B, 4, h, w] -> [B, 3, 4h, 4w] in [-1, 1]."""
        w = self.w
        a = F.silu(F.conv2d(z, w["vae.dec.0.w"], w["vae.dec.0.b"], padding=1))
        last = len(DEC_CHANNELS) - 1
        for i in range(last):
            if i:
                a = F.interpolate(a, scale_factor=2, mode="nearest")
                a = F.silu(F.conv2d(a, w[f"vae.dec.{i}.w"], w[f"vae.dec.{i}.b"], padding=1))
            if i < self.decoder_blocks:  # a + conv(silu(conv(a)))
                p = f"vae.dec.res{i}."
                h = F.silu(F.conv2d(a, w[p + "a.w"], w[p + "a.b"], padding=1))
                a = a + F.conv2d(h, w[p + "b.w"], w[p + "b.b"], padding=1)
        return torch.tanh(F.conv2d(a, w[f"vae.dec.{last}.w"], w[f"vae.dec.{last}.b"], padding=1))

    def encode(self, rgb: torch.Tensor) -> torch.Tensor:
        """[B, 3, H, W] in [-1, 1] (H, W multiples of 4) -> [B, 4, H/4, W/4]."""
        w = self.w
        a = rgb
        last = len(ENC_CHANNELS) - 1
        for i, (_, _, stride) in enumerate(ENC_CHANNELS):
            a = F.conv2d(a, w[f"vae.enc.{i}.w"], w[f"vae.enc.{i}.b"], stride=stride, padding=1)
            if i != last:
                a = F.silu(a)
        return a

    def preview(self, z: torch.Tensor) -> torch.Tensor:
        """[B, 4, h, w] -> [B, 3, h, w] in about [-1, 1]."""
        return (torch.einsum("bchw,co->bohw", z, self.w["preview.rgb"])
                + self.w["preview.rgb_b"][None, :, None, None])


# --- sampling (the C++ pipeline's sampler) -----------------------------------

def initial_noise(seed: int, shape: Sequence[int]) -> np.ndarray:
    """The C++ pipeline's noise for a request seed: splitmix64 from
    seed * 0x2545f4914f6cdd1d + 0x1234567, two draws per Box-Muller value
    (cos branch)."""
    m = (1 << 64) - 1
    state = (int(seed) * 0x2545F4914F6CDD1D + 0x1234567) & m
    n = int(np.prod(shape))
    k = np.arange(1, 2 * n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(state) + k * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u1 = ((z[0::2] >> np.uint64(11)).astype(np.float64) + 1.0) * (1.0 / 9007199254740992.0)
    u2 = (z[1::2] >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    v = np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)
    return v.astype(np.float32).reshape(shape)


class StepCache:
    """The step cache (the C++ reference::StepCache): a step whose block-0
    modulated input differs from the one of the last step that ran the
    blocks by less than `threshold` (relative L1) runs no block; each of
    guidance's branches adds that step's residual instead. The first step
    always runs them; threshold 0 is off."""

    def __init__(self, threshold: float = 0.0):
        self.threshold = float(threshold)
        self.anchor = None    # [1, n, DIT_DIM]
        self.residual = None  # [B, n, DIT_DIM]: the branches' residuals.
        self.computed = 0
        self.skipped = 0

    def step(self, model: "Model", x: torch.Tensor, sigma: torch.Tensor,
             cond: torch.Tensor, lora: Lora = ()) -> torch.Tensor:
        """model.denoise(x, sigma, cond) for a batch of guidance's branches
        of one latent (the same x and sigma in each), through the cache."""
        X, c2, cached = self.begin(model, x, sigma)
        if cached is not None:
            return cached
        return self.end(model, X, c2, model.blocks(X, c2, cond, lora), x.shape)

    def begin(self, model: "Model", x: torch.Tensor, sigma: torch.Tensor):
        """A step's first half: (X, c2, the prediction when the cache skips
        the blocks, else None). A step that runs the blocks (alone or in a
        batch with other jobs') finishes with end()."""
        X, c2 = model.embed(x, sigma)
        if self.threshold > 0:
            m = model.modulated_input(X[:1], c2[:1])
            if (self.anchor is not None
                    and float((m - self.anchor).abs().double().sum()
                              / self.anchor.abs().double().sum()) < self.threshold):
                self.skipped += 1
                return X, c2, model.head(X + self.residual, c2, x.shape)
            self.anchor = m
        return X, c2, None

    def end(self, model: "Model", X: torch.Tensor, c2: torch.Tensor, out: torch.Tensor,
            shape) -> torch.Tensor:
        """The prediction from the blocks' output `out` for X; keeps its residual."""
        if self.threshold > 0:
            self.residual = out - X
        self.computed += 1
        return model.head(out, c2, shape)


@torch.no_grad()
def sample(model: Model, prompts: List[str], latent_shape, seeds: Sequence[int], steps: int = 12,
           guidance: float = 4.0, negative: str = "", lora: Lora = ()) -> torch.Tensor:
    """Flow-matching Euler with classifier-free guidance, as the C++ sampler:
    sigma_i = 1 - i/steps; x0 = x0_u + g (x0_c - x0_u);
    x += (sigma_next - sigma) (x - x0) / sigma. Returns [B, 4, t, h, w]."""
    x = torch.tensor(np.stack([initial_noise(s, (LATENT, *latent_shape)) for s in seeds]))
    return sample_from(model, prompts, x, 0, steps, guidance, negative, lora)


def edit_start_step(steps: int, strength: float) -> int:
    """The first step an edit of `strength` (0, 1] samples (the C++
    reference::EditStartStep): steps - floor(strength * steps), at most
    steps - 1."""
    noised = int(math.floor(np.float32(strength) * np.float32(steps)))
    return min(max(steps - noised, 0), steps - 1)


def encode_picture(model: Model, rgb: np.ndarray) -> torch.Tensor:
    """uint8 [H, W, 3] (H, W multiples of 16) -> the latent [1, 4, 1, H/4, W/4]
    the C++ reference::EncodePicture gives at the picture's own size."""
    x = torch.from_numpy(rgb.astype(np.float32) / np.float32(127.5) - 1).permute(2, 0, 1)
    return model.encode(x[None])[:, :, None]


@torch.no_grad()
def sample_edit(model: Model, prompt: str, z0: torch.Tensor, seed: int, steps: int = 12,
                guidance: float = 4.0, strength: float = 0.6, negative: str = "") -> torch.Tensor:
    """An image edit as the C++ sampler runs it: from step
    edit_start_step(steps, strength), x = (1 - sigma) z0 + sigma * noise."""
    start = edit_start_step(steps, strength)
    sigma = np.float32(1) - np.float32(start) / np.float32(steps)
    noise = torch.tensor(initial_noise(seed, tuple(z0.shape[1:])))[None]
    x = float(np.float32(1) - sigma) * z0 + float(sigma) * noise
    return sample_from(model, [prompt], x, start, steps, guidance, negative)


@torch.no_grad()
def sample_from(model: Model, prompts: List[str], x: torch.Tensor, start: int, steps: int,
                guidance: float, negative: str = "", lora: Lora = ()) -> torch.Tensor:
    """The sampler's steps start..steps-1 from x [B, 4, t, h, w]; `lora`:
    the adapters every sample runs with (Model.blocks)."""
    b = len(prompts)
    cond = model.encode_text(prompts)
    unc = model.encode_text([negative] * b)
    for i in range(start, steps):
        sigma, nxt = 1.0 - i / steps, 1.0 - (i + 1) / steps
        sig = torch.full((b,), sigma)
        both = model.denoise(torch.cat([x, x]), torch.cat([sig, sig]), torch.cat([cond, unc]),
                             lora)
        xc, xu = both[:b], both[b:]
        x0 = xu + guidance * (xc - xu)
        x = x + ((nxt - sigma) / sigma) * (x - x0)
    return x


def frames_from_latent(model: Model, z: torch.Tensor, frames: int) -> torch.Tensor:
    """Decoded frames [frames, 3, H, W] of one latent [4, t, h, w]: frame 0
    from latent frame 0, frames 4k-3..4k blend latent frames k-1 and k."""
    out = [z[:, 0]]
    for k in range(1, z.shape[1]):
        for sub in range(1, 5):
            if len(out) >= frames:
                break
            a = sub / 4.0
            out.append((1 - a) * z[:, k - 1] + a * z[:, k])
    return model.decode(torch.stack(out))


def to_uint8(rgb: torch.Tensor) -> np.ndarray:
    """[..., 3, H, W] in [-1, 1] -> uint8 [..., H, W, 3] as the C++ decoder
    rounds: (v + 1) * 127.5 + 0.5, clamped, truncated."""
    v = ((rgb + 1.0) * 127.5 + 0.5).clamp(0, 255).to(torch.uint8)
    return v.movedim(-3, -1).cpu().numpy()
