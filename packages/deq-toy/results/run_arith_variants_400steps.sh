#!/bin/bash
# Arithmetic runs on the other training variants and with the length-independent readout, at the reduced budget of
# run_arith_400steps.sh (400 steps of batch 64, seed 0, the same flags): models trained on the biased 4-operation
# data, GRU and GRU-DEQ trained on the 2-operation data (plain and biased), and readout=last models on the 4-operation
# data (the only ones that can read the 41-symbol set), including the Jacobian-regularized GRU-DEQ. Two lanes in
# parallel, one torch thread each; then the three tables are written from the finished run folders.
#
# Usage: PY=/path/to/python bash run_arith_variants_400steps.sh OUT DATA
#   PY    the interpreter with deq-toy installed (default: python)
#   OUT   run folders: OUT/four_biased/PRESET, OUT/two/PRESET, OUT/two_biased/PRESET, OUT/last/PRESET; tables in OUT
#   DATA  generated datasets (shared with run_arith_400steps.sh: the files are the same)
set -e
PY=${PY:-python}
OUT=${1:-runs/arith/variants}
DATA=${2:-data/arith}
export OMP_NUM_THREADS=1
FLAGS="max_steps=400 eval_every=100 n_valid=2000 log_every=20"
mkdir -p "$OUT"

# Every data file first (so that the two lanes never write the same file).
$PY -m deq_toy.reproduce arithmetic --output-dir "$OUT" --data-dir "$DATA" \
  --runs arith-gru --variants four_biased,two,two_biased $FLAGS readout=last --prepare-data
$PY -m deq_toy.reproduce arithmetic --output-dir "$OUT" --data-dir "$DATA" --runs arith-gru $FLAGS readout=last \
  --prepare-data

run() {  # run GROUP PRESET [extra overrides]: train OUT/GROUP/PRESET with FLAGS, wall time in OUT/GROUP/PRESET.time
  local group=$1 name=$2
  shift 2
  mkdir -p "$OUT/$group"
  /usr/bin/time -f "%e s wall" -o "$OUT/$group/$name.time" $PY -m deq_toy.train --config "$name" --data-dir "$DATA" \
    --output-dir "$OUT/$group/$name" --no-progress $FLAGS "$@" > "$OUT/$group/$name.log" 2>&1
}
lane1() {
  for name in arith-fc arith-gru arith-stacked-gru arith-deq; do run four_biased $name variant=four_biased; done
  for name in arith-gru arith-deq; do run two $name variant=two; done
  run four_biased arith-repeated-gru variant=four_biased
  run last arith-deq-jac readout=last
}
lane2() {
  for name in arith-gru arith-stacked-gru arith-deq; do run last $name readout=last; done
  for name in arith-gru arith-deq; do run two_biased $name variant=two_biased; done
  run last arith-repeated-gru readout=last
}
lane1 &
lane2 &
wait

# The tables (the runs are finished, so these only read them).
$PY -m deq_toy.reproduce arithmetic --output-dir "$OUT" --data-dir "$DATA" --no-progress --name table_trained_biased \
  --runs arith-fc,arith-gru,arith-stacked-gru,arith-repeated-gru,arith-deq --variants four_biased $FLAGS
$PY -m deq_toy.reproduce arithmetic --output-dir "$OUT" --data-dir "$DATA" --no-progress --name table_trained_two_ops \
  --runs arith-gru,arith-deq --variants two,two_biased $FLAGS
$PY -m deq_toy.reproduce arithmetic --output-dir "$OUT/last" --data-dir "$DATA" --no-progress \
  --name table_length_generalization \
  --runs arith-gru,arith-stacked-gru,arith-repeated-gru,arith-deq,arith-deq-jac $FLAGS readout=last
echo done > "$OUT/ALL_DONE"
