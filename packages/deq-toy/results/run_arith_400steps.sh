#!/bin/bash
# Arithmetic reproduction at a reduced budget: every model 400 steps of batch 64 (25600 examples, about half an epoch
# of the 50000 training set); three lanes in parallel, one torch thread each.
PY=${PY:-python}                 # the interpreter with deq-toy installed
OUT=${1:-runs/arith/repro}           # run folders (first argument)
DATA=${2:-data/arith}              # generated datasets (second argument)
mkdir -p "$OUT"
run() {  # run NAME... sequentially through the reproduce entry's per-run logic (train, results.json)
  for name in "$@"; do
    /usr/bin/time -f "%e s wall" -o "$OUT/$name.time" $PY -m deq_toy.train --config $name --data-dir "$DATA" \
      --output-dir $OUT/$name --no-progress max_steps=400 eval_every=100 n_valid=2000 log_every=20 > $OUT/$name.log 2>&1
  done
}
mkdir -p $OUT
run arith-repeated-gru &
run arith-deq-jac &
run arith-fc arith-gru arith-stacked-gru arith-deq &
wait
echo done > $OUT/ALL_DONE
