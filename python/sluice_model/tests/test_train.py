"""The training command's resumable phase 1: a run that takes its VAE from
--vae-out of an earlier run writes the bytes a full run writes, and a VAE of
other arguments is refused. (Tiny runs: 2 VAE steps, 3 denoiser steps.)"""

import hashlib

from sluice_model import safetensors, train

TINY = ["--vae-steps", "2", "--steps", "3", "--images", "64", "--videos", "16", "--eval", "0"]


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
        "'seed 20261203 vae-steps 2 vae-batch 16 vae-object-weight 10.0'" in capsys.readouterr().out
    assert not (tmp_path / "b").exists()
