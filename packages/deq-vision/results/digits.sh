#!/usr/bin/env bash
# The CPU-scale result of docs/deq-vision-results.md: MDEQ, MDEQ + JR and a small ResNet on scikit-learn's 8x8 digits (upsampled to
# 16x16), one budget (400 steps of 64 images), one thread each; then the hard-stop sweep of both MDEQs.
# Usage: bash packages/deq-vision/results/digits.sh [RUNS_DIR]   (about 20 minutes on one CPU core)
set -euo pipefail
RUNS=${1:-runs/digits}
for name in digits-resnet digits-mdeq digits-mdeq-jr; do
    python -m deq_vision.train --config "$name" --output-dir "$RUNS/$name" --threads 1
done
for name in digits-mdeq digits-mdeq-jr; do
    python -m deq_vision.evaluate --checkpoint "$RUNS/$name" --max-steps 12 --threads 1
done
