"""The training command: its resumable phase 1 (a run that takes its VAE from
--vae-out of an earlier run writes the bytes a full run writes; a VAE of other
arguments is refused), its options, the shape cells. (Tiny runs: 2 VAE
steps, 3 denoiser steps.)"""

import hashlib

import numpy as np
import torch

from sluice_model import golden, safetensors, scenes, train

TINY = ["--vae-steps", "2", "--steps", "3", "--images", "64", "--videos", "16", "--eval", "0",
        "--vae-eval", "0"]


def refused(tmp_path, args) -> None:
    """train.main on `args` (with TINY) exits 2: a bad argument, refused."""
    try:
        train.main(["--out", str(tmp_path / "x")] + TINY + list(args))
    except SystemExit as e:
        assert e.code == 2, (args, e.code)
    else:
        raise AssertionError(f"accepted {args}")


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_a_run_resumed_from_its_vae_writes_the_full_runs_bytes(tmp_path):
    out, vae = tmp_path / "w", tmp_path / "vae"
    assert train.main(["--out", str(out), "--vae-out", str(vae), "--vae-noise", "0.1"] + TINY) == 0
    full = digest(out)
    out.unlink()
    assert train.main(["--out", str(out), "--vae-from", str(vae), "--vae-noise", "0.1",
                       "--eval-every", "2"] + TINY) == 0
    assert digest(out) == full
    _, meta = safetensors.load(str(out))
    assert meta["train_args"] == f"--out {out} --vae-noise 0.1 " + " ".join(TINY)


def test_a_vae_of_other_arguments_is_refused(tmp_path, capsys):
    vae = tmp_path / "vae"
    safetensors.save(str(vae), {}, {"vae_args": "seed 20261203 vae-steps 2 vae-batch 16 "
                                                "vae-object-weight 1.0"})
    assert train.main(["--out", str(tmp_path / "b"), "--vae-from", str(vae),
                       "--vae-object-weight", "10"] + TINY) == 2
    assert "phase 1 of 'seed 20261203 vae-steps 2 vae-batch 16 vae-object-weight 1.0', not of " \
        "'seed 20261203 vae-steps 2 vae-batch 32 vae-object-weight 10.0 vae-noise 0.2 " \
        "vae-crop 64 vae-decoder-blocks 3'" in capsys.readouterr().out
    assert not (tmp_path / "b").exists()


def test_shape_cells_mark_where_the_shapes_differ():
    obj = scenes.SceneObject("large", "red", "circle", "left")
    cells = train.shape_cells(scenes.Scene("blue", (obj,)))
    assert cells.shape == (32, 32) and cells.max() == 1.0
    # The object spans x 0.095..0.345, y 0.375..0.625 of the picture: cells
    # 3..11 across, 12..19 down (4 pixels each); nothing is marked away
    # from it.
    ys, xs = np.nonzero(cells)
    assert xs.min() >= 3 and xs.max() <= 11 and ys.min() >= 11 and ys.max() <= 20, (xs, ys)
    # Every shape's centre pixel is inside all four masks: not marked.
    assert cells[16, 7] < cells.max()


def test_the_position_scale_shape_weight_and_layout_share_reach_the_weights(tmp_path, capsys):
    out = tmp_path / "w"
    assert train.main(["--out", str(out), "--position-scale", "1.0", "--shape-weight", "20",
                       "--layout-share", "0.25"] + TINY) == 0
    _, meta = safetensors.load(str(out))
    assert meta["position_scale"] == "1.0"
    assert "--shape-weight 20 --layout-share 0.25" in meta["train_args"]
    for bad in (["--position-scale", "0"], ["--position-scale", "5"], ["--shape-weight", "-1"],
                ["--layout-share", "1"], ["--vae-eval", "-1"]):
        refused(tmp_path, bad)
    assert "--position-scale: 0.0 is not in (0, 4]" in capsys.readouterr().err


def test_object_crops_hold_an_object_on_the_latent_grid():
    rng = np.random.default_rng(3)
    imgs = np.stack([scenes.render(scenes.random_scene(rng, "train")) for _ in range(24)])
    crops = train.object_crops(np.random.default_rng(4), imgs, 64)
    assert crops.shape == (24, 64, 64, 3)
    for img, crop in zip(imgs, crops):
        # Some object pixel (one differing from the picture's corner) is in
        # the window, and the window is the picture at a multiple of 8.
        assert np.any(crop != img[0, 0]), "no object in the window"
        found = [(y, x) for y in range(0, 65, 8) for x in range(0, 65, 8)
                 if np.array_equal(img[y:y + 64, x:x + 64], crop)]
        assert found, "not a window of the picture on the 8-pixel grid"


def test_a_vae_trained_on_crops_is_recorded_and_bad_crops_refused(tmp_path, capsys):
    out, vae = tmp_path / "w", tmp_path / "vae"
    assert train.main(["--out", str(out), "--vae-out", str(vae), "--vae-crop", "48",
                       "--vae-decoder-blocks", "0"] + TINY) == 0
    _, meta = safetensors.load(str(vae))
    assert meta["vae_args"].endswith(" vae-crop 48"), meta["vae_args"]
    # The defaults: 64-pixel windows, batches of 32, three decoder blocks.
    assert train.main(["--out", str(out), "--vae-out", str(vae)] + TINY) == 0
    _, meta = safetensors.load(str(vae))
    assert meta["vae_args"].endswith(" vae-batch 32 vae-object-weight 10.0 vae-noise 0.2 "
                                      "vae-crop 64 vae-decoder-blocks 3"), meta["vae_args"]
    for bad in ("40", "60", "136"):
        refused(tmp_path, ["--vae-crop", bad])
    assert "--vae-crop: 40 is not 0 or a multiple of 8 in [48, 128]" in capsys.readouterr().err


def test_decoder_blocks_reach_the_weights_and_leave_the_rest_alone(tmp_path, capsys):
    base, blocks = tmp_path / "base", tmp_path / "blocks"
    assert train.main(["--out", str(base), "--vae-decoder-blocks", "0"] + TINY) == 0
    assert train.main(["--out", str(blocks), "--vae-decoder-blocks", "3"] + TINY) == 0
    a, meta_a = safetensors.load(str(base))
    b, meta_b = safetensors.load(str(blocks))
    assert "decoder_blocks" not in meta_a and meta_b["decoder_blocks"] == "3"
    extra = sorted(set(b) - set(a))
    assert extra == sorted(f"vae.dec.res{i}.{p}.{k}" for i in range(3) for p in "ab" for k in "wb")
    assert b["vae.dec.res1.a.w"].shape == (32, 32, 3, 3)  # The second stage: 32 channels.
    model = golden.load(str(blocks))
    assert model.decoder_blocks == 3
    refused(tmp_path, ["--vae-decoder-blocks", "4"])
    assert "--vae-decoder-blocks: 4 is not in [0, 3]" in capsys.readouterr().err


def test_decoder_blocks_start_as_the_identity_and_bad_metadata_is_refused():
    from sluice_model import net
    plain, more = net.init_weights(5), net.init_weights(5, 2)
    assert all(np.array_equal(plain[k], more[k]) for k in plain), "blocks changed other tensors"
    assert not np.any(more["vae.dec.res1.b.w"]) and np.any(more["vae.dec.res1.a.w"])
    z = torch.randn(1, net.LATENT, 4, 4)
    with torch.no_grad():
        a = net.Model(net.Weights(plain)).decode(z)
        b = net.Model(net.Weights(more), decoder_blocks=2).decode(z)
    assert torch.equal(a, b), "zero second convolutions: the same pictures"
    assert net.decoder_blocks_of({}) == 0 and net.decoder_blocks_of({"decoder_blocks": "3"}) == 3
    for bad in ("4", "-1", "x", ""):
        try:
            net.decoder_blocks_of({"decoder_blocks": bad})
        except ValueError as e:
            assert "decoder_blocks" in str(e)
        else:
            raise AssertionError(f"accepted {bad!r}")


def test_word_dropout_leaves_out_object_words_and_keeps_the_background():
    rng = np.random.default_rng(0)
    caption = ("a large red circle on the left and a small blue square at the top "
               "on a green background")
    assert train.drop_words(caption, rng, 0.0) == caption
    seen = set()
    for _ in range(200):
        words = train.drop_words(caption, rng, 0.5).split()
        assert words[-3:] == ["a", "green", "background"], words
        assert words.count("large") == 1 and words.count("small") == 1
        seen.update(w for w in words if w in scenes.COLOURS or w in scenes.SHAPES)
        seen.add(len(words))
    # Each object word is left out sometimes and kept sometimes.
    assert {"red", "blue", "circle", "square"} <= seen
    assert min(x for x in seen if isinstance(x, int)) < len(caption.split())
    assert train.drop_words("", rng, 0.5) == ""


def test_video_shape_cells_follow_the_moving_object():
    obj = scenes.SceneObject("small", "red", "circle", "centre")
    video = scenes.Scene("white", (obj,), direction="down")
    rows = []
    for frame in (0, 8, 16):
        cells = train.shape_cells(video, 128, frame, 17)
        assert cells.max() == 1.0
        ys, xs = np.nonzero(cells)
        assert 14 <= xs.mean() <= 17, xs  # Centred across, all the way down.
        rows.append(ys.mean())
    assert rows[0] < rows[1] < rows[2], rows
    # Frame 0 of a video is where the still picture's object is moved to.
    still = scenes.Scene("white", (scenes.SceneObject("small", "red", "circle", "top",
                                                      dy=0.5 - 0.22 - scenes.TRAVEL),))
    assert np.array_equal(train.shape_cells(video, 128, 0, 17), train.shape_cells(still))


def test_word_dropout_and_video_shape_reach_the_recorded_command(tmp_path, capsys):
    out = tmp_path / "w"
    assert train.main(["--out", str(out), "--word-dropout", "0.2", "--video-shape"] + TINY) == 0
    _, meta = safetensors.load(str(out))
    assert "--word-dropout 0.2 --video-shape" in meta["train_args"]
    for bad in ("-0.1", "0.6"):
        refused(tmp_path, ["--word-dropout", bad])
    assert "--word-dropout: 0.6 is not in [0, 0.5]" in capsys.readouterr().err
