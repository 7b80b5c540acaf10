#!/bin/bash
# Before/after on one machine, alternated so drift falls on both sides alike: the builtin evaluator
# bench's steady state, f303be2 (git archive in .before/, carried) against HEAD, PAIRS times each
# (B H B H ...); each run stops once its steady-state line is out (f303be2's bench has no --no-aa).
# Every run's line and each side's median under $OUT. A run is cut at RUN_S seconds; none starts
# after DEADLINE_S (the call's own limit, less a run and some slack).
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
STEADY='^\[steady state[^]]*\] [0-9]+ candidates in'
start=$(date +%s)
run() {  # side, file: the bench in the side's tree until its steady line is written
  dir=.; [ $1 = before ] && dir=.before
  (cd $dir && exec python bench/evaluator_bench.py --workers 8 --rounds ${ROUNDS:-3}) > $2 2>&1 &
  pid=$!
  for _ in $(seq 1 ${RUN_S:-130}); do
    sleep 1; grep -qE "$STEADY" $2 && break; kill -0 $pid 2>/dev/null || break
  done
  pkill -KILL -P $pid 2>/dev/null; kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
  pkill -KILL -f -- "-m fitness\." 2>/dev/null; sleep 2  # its children, before the next run
}
for k in $(seq 1 ${PAIRS:-2}); do
  for side in before head; do
    [ $(( $(date +%s) - start + ${RUN_S:-130} )) -gt ${DEADLINE_S:-480} ] && break 2
    run $side $OUT/$side-$k.txt
    rate=$(grep -E "$STEADY" $OUT/$side-$k.txt | sed -E 's/.* = ([0-9.]+) candidates\/min.*/\1/')
    echo "$side run $k: steady ${rate:-none (cut or failed)}/min" | tee -a $OUT/ab.txt
  done
done
for side in before head; do
  grep "^$side" $OUT/ab.txt | sed -E 's/.* steady ([0-9.]+)\/min/\1/' | grep -E '^[0-9.]+$' | sort -n | \
    awk -v s=$side '{a[NR]=$1} END {if (NR) printf "%s: steady median %.1f/min over %d runs (%s)\n", s, (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2), NR, a[1] "-" a[NR]}' | tee -a $OUT/ab.txt
done
