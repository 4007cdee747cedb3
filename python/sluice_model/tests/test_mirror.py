"""The PyTorch mirror against the committed golden image and the shipped
weights' recorded digest (the C++ side: reference_models_test)."""

import hashlib
import os

import numpy as np
import pytest
import torch

from sluice_model import evaluate, golden, net, png, safetensors, scenes


def test_the_shipped_weights_match_their_recorded_digest():
    digest = hashlib.sha256(open(golden.WEIGHTS, "rb").read()).hexdigest()
    recorded = open(golden.WEIGHTS + ".sha256").read().split()[0]
    assert digest == recorded


def test_the_weights_hold_exactly_the_architecture():
    tensors, meta = safetensors.load(golden.WEIGHTS)
    # The shipped recipe (train.py's defaults) has three decoder blocks.
    assert net.decoder_blocks_of(meta) == 3
    assert {k: tuple(v.shape) for k, v in tensors.items()} == {
        k: tuple(v) for k, v in net.shapes(3).items()}
    assert meta["format"] == net.FORMAT and meta["version"] == net.VERSION


def test_the_mirror_reproduces_the_golden_image():
    want = png.decode(open(golden.GOLDEN, "rb").read())
    got = golden.golden_image(golden.load())
    assert got.shape == want.shape == (128, 128, 3)
    assert golden.psnr(got, want) >= 40.0


def test_the_mirror_reproduces_the_golden_video():
    want = png.decode(open(golden.GOLDEN_VIDEO, "rb").read())
    got = golden.golden_video_frames(golden.load())
    assert got.shape == want.shape == (128, 384, 3)
    assert golden.psnr(got, want) >= 40.0


def test_the_mirror_reproduces_the_golden_roundtrip_and_edit():
    model = golden.load()
    for path, got in ((golden.GOLDEN_ROUNDTRIP, golden.golden_roundtrip(model)),
                      (golden.GOLDEN_EDIT, golden.golden_edit(model))):
        want = png.decode(open(path, "rb").read())
        assert got.shape == want.shape == (128, 128, 3)
        assert golden.psnr(got, want) >= 40.0, path
    assert net.edit_start_step(12, 0.6) == 5 and net.edit_start_step(12, 1.0) == 0
    assert net.edit_start_step(12, 0.01) == 11


def test_the_noise_matches_the_cpp_generator():
    # Rng(1 * 0x2545f4914f6cdd1d + 0x1234567).Normal() x 3, from the C++
    # pipeline (reference_models_test prints the same values).
    v = net.initial_noise(1, (3,))
    assert np.allclose(v, GOLDEN_NOISE, atol=1e-6), v


GOLDEN_NOISE = [-1.2876450, -0.5429659, -0.1967017]


def test_the_position_scale_comes_from_the_metadata():
    assert net.position_scale_of({}) == net.DEFAULT_POSITION_SCALE
    assert net.position_scale_of({"position_scale": "1.0"}) == 1.0
    for bad in ("", "abc", "0", "-1", "4.5", "nan"):
        try:
            net.position_scale_of({"position_scale": bad})
        except ValueError as e:
            assert "metadata position_scale" in str(e), e
        else:
            raise AssertionError(f"accepted position_scale {bad!r}")
    w = net.Weights(net.init_weights(3))
    a = net.Model(w).positions(1, 4, 4)
    b = net.Model(w, position_scale=1.0).positions(1, 4, 4)
    assert a.shape == b.shape == (16, net.DIT_DIM)
    # Token (0, 0, 1): the fastest j component is sin(s * 1).
    j0 = net.DIT_DIM // 4 + 3 * net.DIT_DIM // 8
    assert abs(float(a[1, j0]) - 3 * np.sin(0.25)) < 1e-6
    assert abs(float(b[1, j0]) - 3 * np.sin(1.0)) < 1e-6


def test_shape_by_size_counts_one_object_scenes_of_each_size():
    def one(size):
        return scenes.Scene("blue", (scenes.SceneObject(size, "red", "circle", "left"),))

    two = scenes.Scene("blue", (scenes.SceneObject("small", "red", "circle", "left"),
                                scenes.SceneObject("small", "red", "square", "right")))
    sc = [one("small"), one("small"), one("large"), two]
    marks = [{"shape": 1.0}, {"shape": 0.0}, {"shape": 1.0}, {"shape": 0.0}]
    assert evaluate.shape_by_size(sc, marks) == {"small_shape_accuracy": 0.5,
                                                 "large_shape_accuracy": 1.0}
    assert evaluate.shape_by_size(sc[:2], marks[:2])["large_shape_accuracy"] is None


def test_shape_read_as_says_what_each_asked_shape_came_out_as():
    def scene(shape, colour="red"):
        return scenes.Scene("blue", (scenes.SceneObject("large", colour, shape, "left"),))

    asked = [scene("diamond"), scene("diamond"), scene("circle"), scene("square")]
    drawn = [scene("circle"), scene("diamond"), scene("circle"), scene("square", "green")]
    outs = [scenes.render(s, 128) for s in drawn]
    assert evaluate.shape_read_as(asked, outs) == {
        "diamond": {"circle": 1, "diamond": 1}, "circle": {"circle": 1}, "square": {"none": 1}}


def test_the_step_cache_off_is_the_plain_denoiser_and_on_skips_steps():
    import torch
    model = golden.load()
    cond = torch.cat([model.encode_text(["a small red circle on the left"]),
                      model.encode_text([""])])
    x0 = torch.tensor(net.initial_noise(3, (net.LATENT, 1, 32, 32)))[None]

    def run(cache):
        x = x0
        for i in range(12):
            sigma, nxt = 1.0 - i / 12, 1.0 - (i + 1) / 12
            sig = torch.full((2,), sigma)
            both = (model.denoise(torch.cat([x, x]), sig, cond) if cache is None
                    else cache.step(model, torch.cat([x, x]), sig, cond))
            x = x + ((nxt - sigma) / sigma) * (x - (both[1:2] + 4.0 * (both[0:1] - both[1:2])))
        return x

    with torch.no_grad():
        plain = run(None)
        off, on = net.StepCache(0), net.StepCache(0.3)
        assert torch.equal(run(off), plain) and off.skipped == 0 and off.computed == 12
        cached = run(on)
    assert 0 < on.skipped < 12 and on.computed + on.skipped == 12
    rel = float((cached - plain).abs().sum() / plain.abs().sum())
    assert 0 < rel < 0.5, rel  # Near the uncached latent, not on it.


def test_the_shipped_adapters_match_their_recorded_digests():
    for path in (golden.MIRROR_ADAPTER,):
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
        assert digest == open(path + ".sha256").read().split()[0], path


def test_the_mirror_adapter_reproduces_its_golden_picture_and_scale_0_is_the_base():
    model = golden.load()
    want = png.decode(open(golden.GOLDEN_MIRROR, "rb").read())
    got = golden.golden_mirror(model)
    assert golden.psnr(got, want) >= 40.0
    assert golden.psnr(got, png.decode(open(golden.GOLDEN, "rb").read())) < 20.0
    g = 128 // net.SCALE
    adapter = net.load_adapter(golden.MIRROR_ADAPTER)
    with torch.no_grad():
        plain = net.sample(model, [golden.GOLDEN_PROMPT], (1, g, g), [1])
        off = net.sample(model, [golden.GOLDEN_PROMPT], (1, g, g), [1], lora=[(adapter, 0.0)])
    assert torch.equal(plain, off)


def test_an_adapter_of_other_shapes_is_refused_by_name(tmp_path):
    path = str(tmp_path / "bad.safetensors")
    safetensors.save(path, {"dit.blocks.0.qkv.lora_a": np.zeros((96, 4), np.float32),
                            "dit.blocks.0.qkv.lora_b": np.zeros((4, 96), np.float32)},
                     {"format": net.ADAPTER_FORMAT, "rank": "4"})
    with pytest.raises(ValueError, match="dit.blocks.0.qkv.lora_b"):
        net.load_adapter(path)
