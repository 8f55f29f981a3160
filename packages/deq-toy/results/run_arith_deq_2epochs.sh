#!/bin/bash
# Longer budget for the two GRU-DEQs: 2 epochs of the 50000 training set (1562 steps of batch 64).
PY=${PY:-python}                 # the interpreter with deq-toy installed
OUT=${1:-runs/arith/repro5}           # run folders (first argument)
DATA=${2:-data/arith}              # generated datasets (second argument)
mkdir -p "$OUT"
for name in arith-deq arith-deq-jac; do
  /usr/bin/time -f "%e s wall" -o "$OUT/$name.time" $PY -m deq_toy.train --config $name --data-dir "$DATA" \
    --output-dir $OUT/$name --no-progress epochs=2 n_valid=2000 log_every=25 eval_every=200 > $OUT/$name.log 2>&1 &
done
wait
