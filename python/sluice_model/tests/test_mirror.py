"""The PyTorch mirror against the committed golden image and the shipped
weights' recorded digest (the C++ side: reference_models_test)."""

import hashlib
import os

import numpy as np

from sluice_model import golden, net, png, safetensors


def test_the_shipped_weights_match_their_recorded_digest():
    digest = hashlib.sha256(open(golden.WEIGHTS, "rb").read()).hexdigest()
    recorded = open(golden.WEIGHTS + ".sha256").read().split()[0]
    assert digest == recorded


def test_the_weights_hold_exactly_the_architecture():
    tensors, meta = safetensors.load(golden.WEIGHTS)
    assert {k: tuple(v.shape) for k, v in tensors.items()} == {
        k: tuple(v) for k, v in net.shapes().items()}
    assert meta["format"] == net.FORMAT and meta["version"] == net.VERSION


def test_the_mirror_reproduces_the_golden_image():
    want = png.decode(open(golden.GOLDEN, "rb").read())
    got = golden.golden_image(golden.load())
    assert got.shape == want.shape == (128, 128, 3)
    assert golden.psnr(got, want) >= 40.0


def test_the_noise_matches_the_cpp_generator():
    # Rng(1 * 0x2545f4914f6cdd1d + 0x1234567).Normal() x 3, from the C++
    # pipeline (reference_models_test prints the same values).
    v = net.initial_noise(1, (3,))
    assert np.allclose(v, GOLDEN_NOISE, atol=1e-6), v


GOLDEN_NOISE = [-1.2876450, -0.5429659, -0.1967017]
