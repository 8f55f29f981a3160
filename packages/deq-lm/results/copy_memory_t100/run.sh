#!/bin/sh
# The copy-memory table of packages/deq-lm/README.md: T = 100, about 14K parameters each (TCN 16K), one budget for
# all four models (1500 steps of 32 sequences, Adam 2e-3 with warmup and cosine decay, gradient clipping 1.0).
# Run from the repository root; writes runs/copy-MODEL/ (metrics.jsonl, training.png, checkpoints).
set -e
for model in deq-transformer tcn lstm gru; do
    OMP_NUM_THREADS=1 python -m deq_lm.train --config "copy-$model" --output-dir "runs/copy-$model"
done
python -m deq_lm.evaluate --checkpoint runs/copy-deq-transformer --split test
