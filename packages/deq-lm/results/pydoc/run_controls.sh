#!/bin/bash
# Controls for the CPU-scale table (same budget as run.sh): the plain DEQ at the JR run's lower limits (12 / 12,
# no Jacobian term), and JR with a quarter of the paper's weight (0.5 instead of 2.0). Two lanes, one thread each.
#   bash packages/deq-lm/results/pydoc/run_controls.sh [OUT_DIR]        (PY=... selects the interpreter)
set -e
PY=${PY:-python}
OUT=${1:-runs/pydoc}
mkdir -p "$OUT"
train() {  # NAME OVERRIDES...
  local name=$1; shift
  /usr/bin/time -f "%e" -o "$OUT/$name.seconds" env OMP_NUM_THREADS=1 \
    $PY -m deq_lm.train --config pydoc-deq-transformer-jr --output-dir "$OUT/$name" --threads 1 "$@" > "$OUT/$name.log" 2>&1
}
train pydoc-deq-transformer-limit12 deq.jac_weight=0 &
train pydoc-deq-transformer-jr-w0.5 deq.jac_weight=0.5 &
wait
