#!/bin/bash
# The builtin evaluator bench's steady state for several variants in one call, run in the order
# given so drift falls on all alike: RUNS="label:dir:extra args;label:dir:extra args;..." (dir: a
# tree carried beside the checkout, e.g. .base/ from `git archive`, or . for the working tree).
# Example: RUNS="base:.base:;head:.:;head-spares6:.:--spares 6;base:.base:" bash bench/device/evaluator_variants.sh
# Each run stops once its steady-state line is out, or at RUN_S seconds; none starts after
# DEADLINE_S (the call's own limit, less a run and some slack). Every run's lines and a summary
# per label under $OUT. UNTIL: the line that ends a run (default its steady-state line; '^bound:'
# keeps the phase table, printed after it). Example for TritonBench:
# RUNS="head:.:--suite tritonbench --tasks a,b;base:.base:--suite tritonbench --tasks a,b" ROUNDS=4 UNTIL='^bound:' ...
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
STEADY='^\[steady state[^]]*\] [0-9]+ candidates in'
start=$(date +%s)
k=0
IFS=';' read -ra SPECS <<< "${RUNS:?RUNS=label:dir:args;...}"
for spec in "${SPECS[@]}"; do
  IFS=':' read -r label dir extra <<< "$spec"
  [ $(( $(date +%s) - start + ${RUN_S:-130} )) -gt ${DEADLINE_S:-480} ] && break
  k=$((k + 1)); f=$OUT/$k-$label.txt
  # shellcheck disable=SC2086 - the extra arguments split on spaces
  (cd "$dir" && exec python bench/evaluator_bench.py --workers 8 --rounds ${ROUNDS:-3} --no-aa $extra) > $f 2>&1 &
  pid=$!
  for _ in $(seq 1 ${RUN_S:-130}); do
    sleep 1; grep -qE "${UNTIL:-$STEADY}" $f && break; kill -0 $pid 2>/dev/null || break
  done
  pkill -KILL -P $pid 2>/dev/null; kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
  pkill -KILL -f -- "-m fitness\." 2>/dev/null; sleep 2  # its children, before the next run
  rate=$(grep -E "$STEADY" $f | sed -E 's/.* = ([0-9.]+) candidates\/min.*/\1/')
  echo "$label run $k: steady ${rate:-none (cut or failed)}/min" | tee -a $OUT/variants.txt
done
for label in $(sed -E 's/ run .*//' $OUT/variants.txt | sort -u); do
  grep "^$label run" $OUT/variants.txt | sed -E 's/.* steady ([0-9.]+)\/min/\1/' | grep -E '^[0-9.]+$' | sort -n | \
    awk -v s=$label '{a[NR]=$1} END {if (NR) printf "%s: steady median %.1f/min over %d runs (%s)\n", s, (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2), NR, a[1] "-" a[NR]}' | tee -a $OUT/variants.txt
done
