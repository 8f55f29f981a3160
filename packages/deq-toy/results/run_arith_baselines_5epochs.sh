#!/bin/bash
# Longer budget for the cheap explicit baselines only: 5 epochs of the 50000 training set (3905 steps of batch 64).
PY=${PY:-python}                 # the interpreter with deq-toy installed
OUT=${1:-runs/arith/repro5}           # run folders (first argument)
DATA=${2:-data/arith}              # generated datasets (second argument)
mkdir -p "$OUT"
mkdir -p $OUT
for name in arith-fc arith-gru arith-stacked-gru; do
  /usr/bin/time -f "%e s wall" -o "$OUT/$name.time" $PY -m deq_toy.train --config $name --data-dir "$DATA" \
    --output-dir $OUT/$name --no-progress epochs=5 n_valid=2000 log_every=50 > $OUT/$name.log 2>&1
done
echo done > $OUT/ALL_DONE
