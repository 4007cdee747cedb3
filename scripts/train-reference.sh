#!/usr/bin/env bash
# Trains the reference model from its seed on this machine's CPU (Debian's
# python3-torch) and writes what sluice ships with it:
#   models/sluice-reference.safetensors (+ .sha256)  the weights
#   models/sluice-reference-loss.csv                 the loss curve
#   docs/models/sluice-reference-loss.png            its plot
#   tests/golden/reference_torch_128.png             the PyTorch mirror's golden picture
#   tests/golden/reference_torch_video_128.png       and three frames of its golden video
# Then prints the held-out scores of the PyTorch mirror. ~50 min on this machine
# (one torch thread; docs/models/sluice-reference.md).
# CI never runs this; the committed weights are its output.
# Usage: scripts/train-reference.sh [train.py flags]     (as root on Debian 12)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
out=models/sluice-reference.safetensors
curve=models/sluice-reference-loss.csv
(cd python && /usr/bin/python3 -m sluice_model.train --out "../$out" --curve "../$curve" "$@")
sha256sum "$out" | sed 's|models/||' > "$out.sha256"
(cd python && /usr/bin/python3 -m sluice_model.golden)
gnuplot <<PLOT
set terminal png size 900,420
set output "docs/models/sluice-reference-loss.png"
set datafile separator ","
set logscale y
set xlabel "step"
set ylabel "loss"
set multiplot layout 1,2 title "sluice-reference training loss (seed $(grep -a -o '"seed":"[0-9]*"' "$out" | head -1 | tr -dc 0-9))"
set title "VAE (pixel MSE)"
plot "< grep ^vae $curve" using 2:3 with lines notitle
set title "denoiser (weighted latent MSE)"
plot "< grep ^denoise $curve" using 2:3 with lines title "images", \
     "< grep ^video $curve" using 2:3 with lines title "videos"
unset multiplot
PLOT
echo "train-reference: wrote $out ($(cut -d' ' -f1 "$out.sha256"))"
