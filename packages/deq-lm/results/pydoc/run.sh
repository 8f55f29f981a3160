#!/bin/bash
# CPU-scale language modeling on Python's documentation text (corpus=pydoc, written offline from pydoc_data):
# DEQ-Transformer, the same with Jacobian regularization, and its 4-layer Transformer-XL twin, one budget for all
# (the pydoc-* presets: 1200 steps of 16 x 64 tokens). Two lanes in parallel, one torch thread each; then the
# inference sweep of each DEQ and the summary table.
#   bash packages/deq-lm/results/pydoc/run.sh [OUT_DIR]        (PY=... selects the interpreter)
set -e
PY=${PY:-python}
OUT=${1:-runs/pydoc}
mkdir -p "$OUT"
run() {
  for name in "$@"; do
    /usr/bin/time -f "%e" -o "$OUT/$name.seconds" env OMP_NUM_THREADS=1 TQDM_DISABLE=1 \
      $PY -m deq_lm.train --config "$name" --output-dir "$OUT/$name" --threads 1 > "$OUT/$name.log" 2>&1
  done
}
run pydoc-deq-transformer-jr &
run pydoc-deq-transformer pydoc-transformer-xl &
wait
for name in pydoc-deq-transformer pydoc-deq-transformer-jr; do
  OMP_NUM_THREADS=1 $PY -m deq_lm.evaluate --checkpoint "$OUT/$name" --split test --max-iters 2,4,6,8,12,16,24,32 \
    --tols 3e-1,1e-1,3e-2,1e-2,3e-3,1e-3 > "$OUT/$name.sweep.txt"
done
$PY "$(dirname "$0")/summarize.py" "$OUT"
