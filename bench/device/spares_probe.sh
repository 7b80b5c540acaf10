#!/bin/bash
# The builtin evaluator bench three ways on one GPU: default spares and clean children, 8 spares
# per pool, 8 spares and 16 clean children; prints each pass's rate, how children were served and
# how long a spare's CUDA start took under the load (what bounds the steady rate).
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
B="python bench/evaluator_bench.py --workers 8 --rounds 4 --no-aa"
timeout -s KILL 150 $B > $OUT/a-default.txt 2>&1
timeout -s KILL 150 $B --spares 8 > $OUT/b-spares8.txt 2>&1
timeout -s KILL 150 $B --spares 8 --clean 16 > $OUT/c-spares8-clean16.txt 2>&1
for f in $OUT/*.txt; do echo "== $f"; grep "^\[" $f; grep "bound\|device_start\|timing_prepare\|replay_s\|timing_wait" $f; done
