#!/bin/bash
# Length generalization at the longer budget of run_arith_baselines_5epochs.sh (5 epochs of the 50000 training set,
# 3905 steps of batch 64, seed 0), for the explicit GRUs with readout=last only: at 400 steps no model is far above
# the prior, so the 41-symbol accuracies say little. (The readout=last GRU-DEQ was not run at this budget: it hits
# its 50-iteration limit on every batch after about 250 steps, so 2 epochs would cost more than half an hour here.)
#
# Usage: PY=/path/to/python bash run_arith_last_5epochs.sh OUT DATA
#   OUT   run folders OUT/PRESET and the table OUT/table_length_generalization_5epochs.md
#   DATA  generated datasets (the same files as the other scripts)
set -e
PY=${PY:-python}
OUT=${1:-runs/arith/last-5epochs}
DATA=${2:-data/arith}
export OMP_NUM_THREADS=1
FLAGS="epochs=5 n_valid=2000 log_every=50 readout=last"
mkdir -p "$OUT"
$PY -m deq_toy.reproduce arithmetic --output-dir "$OUT" --data-dir "$DATA" --runs arith-gru $FLAGS --prepare-data
for name in arith-gru arith-stacked-gru; do
  /usr/bin/time -f "%e s wall" -o "$OUT/$name.time" $PY -m deq_toy.train --config $name --data-dir "$DATA" \
    --output-dir "$OUT/$name" --no-progress $FLAGS > "$OUT/$name.log" 2>&1
done
$PY -m deq_toy.reproduce arithmetic --output-dir "$OUT" --data-dir "$DATA" --no-progress \
  --name table_length_generalization_5epochs --runs arith-gru,arith-stacked-gru $FLAGS
echo done > "$OUT/ALL_DONE"
