"""Writes the golden output of the shipped weights, computed by the PyTorch
mirror: the picture the C++ reference pipeline must reproduce (within
PSNR 40 dB) and that the mirror itself must keep producing.

    cd python && /usr/bin/python3 -m sluice_model.golden [--adapters]

The requests: GOLDEN_PROMPT, seed 1, 12 steps, guidance 4, 128x128; and
GOLDEN_VIDEO_PROMPT, the same with 17 frames, of which frames 0, 8 and 16
are stored side by side (GOLDEN_VIDEO, 384x128). For image edits: the
golden image through the VAE's encoder and decoder (GOLDEN_ROUNDTRIP), and
edited to GOLDEN_EDIT_PROMPT at strength 0.6 (GOLDEN_EDIT). With
--adapters (after an adapter is trained again): GOLDEN_PROMPT through the
mirror adapter (GOLDEN_MIRROR).
"""

import os
import sys

import numpy as np
import torch

from . import net, png, safetensors

GOLDEN_PROMPT = "a large red circle on the left on a blue background"
ROOT = os.environ.get("SLUICE_SOURCE_DIR",
                      os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
WEIGHTS = os.path.join(ROOT, "models", "sluice-reference.safetensors")
GOLDEN = os.path.join(ROOT, "tests", "golden", "reference_torch_128.png")
GOLDEN_VIDEO_PROMPT = "a large red circle moving right on a blue background"
GOLDEN_VIDEO = os.path.join(ROOT, "tests", "golden", "reference_torch_video_128.png")
GOLDEN_VIDEO_FRAMES = (0, 8, 16)
# Image edits: the golden image encoded by the VAE's encoder and decoded
# again; and edited to GOLDEN_EDIT_PROMPT (seed 2, strength 0.6, 12 steps,
# guidance 4).
GOLDEN_ROUNDTRIP = os.path.join(ROOT, "tests", "golden", "reference_torch_roundtrip_128.png")
GOLDEN_EDIT = os.path.join(ROOT, "tests", "golden", "reference_torch_edit_128.png")
GOLDEN_EDIT_PROMPT = "a large green circle on the left on a blue background"
# Adapters: the shipped mirror adapter at scale 1 on GOLDEN_PROMPT (seed 1):
# the circle drawn on the right.
MIRROR_ADAPTER = os.path.join(ROOT, "models", "adapters", "mirror.safetensors")
GOLDEN_MIRROR = os.path.join(ROOT, "tests", "golden", "reference_torch_mirror_128.png")


def load(path: str = WEIGHTS) -> net.Model:
    tensors, meta = safetensors.load(path)
    return net.Model(net.Weights(tensors), meta["vocabulary"].split(),
                     net.position_scale_of(meta), net.decoder_blocks_of(meta))


def golden_image(model: net.Model) -> np.ndarray:
    torch.set_num_threads(1)
    g = 128 // net.SCALE
    z = net.sample(model, [GOLDEN_PROMPT], (1, g, g), [1], steps=12, guidance=4.0)
    return net.to_uint8(model.decode(z[:, :, 0]))[0]


def golden_video_frames(model: net.Model) -> np.ndarray:
    """uint8 [128, 384, 3]: frames GOLDEN_VIDEO_FRAMES of the golden
    video, left to right."""
    torch.set_num_threads(1)
    g = 128 // net.SCALE
    z = net.sample(model, [GOLDEN_VIDEO_PROMPT], (5, g, g), [1], steps=12, guidance=4.0)
    frames = net.to_uint8(net.frames_from_latent(model, z[0], 17))
    return np.concatenate([frames[i] for i in GOLDEN_VIDEO_FRAMES], axis=1)


def golden_roundtrip(model: net.Model) -> np.ndarray:
    torch.set_num_threads(1)
    with torch.no_grad():
        z = net.encode_picture(model, png.decode(open(GOLDEN, "rb").read()))
        return net.to_uint8(model.decode(z[:, :, 0]))[0]


def golden_edit(model: net.Model) -> np.ndarray:
    torch.set_num_threads(1)
    with torch.no_grad():
        z0 = net.encode_picture(model, png.decode(open(GOLDEN, "rb").read()))
        z = net.sample_edit(model, GOLDEN_EDIT_PROMPT, z0, 2, steps=12, guidance=4.0, strength=0.6)
        return net.to_uint8(model.decode(z[:, :, 0]))[0]


def golden_mirror(model: net.Model, adapter_path: str = MIRROR_ADAPTER) -> np.ndarray:
    torch.set_num_threads(1)
    g = 128 // net.SCALE
    adapter = net.load_adapter(adapter_path)
    z = net.sample(model, [GOLDEN_PROMPT], (1, g, g), [1], steps=12, guidance=4.0,
                   lora=[(adapter, 1.0)])
    return net.to_uint8(model.decode(z[:, :, 0]))[0]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def main() -> int:
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    model = load()
    with open(GOLDEN, "wb") as f:
        f.write(png.encode(golden_image(model)))
    with open(GOLDEN_VIDEO, "wb") as f:
        f.write(png.encode(golden_video_frames(model)))
    with open(GOLDEN_ROUNDTRIP, "wb") as f:
        f.write(png.encode(golden_roundtrip(model)))
    with open(GOLDEN_EDIT, "wb") as f:
        f.write(png.encode(golden_edit(model)))
    print(f"wrote {GOLDEN}, {GOLDEN_VIDEO}, {GOLDEN_ROUNDTRIP} and {GOLDEN_EDIT}")
    if "--adapters" in sys.argv[1:]:
        with open(GOLDEN_MIRROR, "wb") as f:
            f.write(png.encode(golden_mirror(model)))
        print(f"wrote {GOLDEN_MIRROR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
