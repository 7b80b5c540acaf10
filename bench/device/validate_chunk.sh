#!/bin/bash
# One chunk of a timed `validate --suite tritonbench --pending`, the record carried in runs/ (name
# `runs` in carry) and copied to $OUT as it grows; beside it, every 10 s, the GPU memory of each
# process with its command line ($OUT/gpu-memory.txt), to see which one holds the memory when a
# task fails for lack of it. VALIDATE_S: the chunk's own limit (default 390 s). TRACE=1: through
# bench/request_trace.py, every request of 0.5 s or more in $OUT/trace.txt as it ends. REDO=1: the
# TASKS validated again even where the record has them (their entries replaced).
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
(while sleep 10; do
   cp runs/tritonbench-validation.json $OUT/ 2>/dev/null
   { date +%T; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | while IFS=', ' read -r pid mem unit; do
       echo "  $pid $mem $unit $(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | cut -c1-90)"; done; } >> $OUT/gpu-memory.txt
 done) &
monitor=$!
runner=(python run.py)
[ -n "$TRACE" ] && runner=(python bench/request_trace.py --log $OUT/trace.txt --min-s 0.5 --)
timeout -s TERM ${VALIDATE_S:-390} "${runner[@]}" validate --suite tritonbench --workers 8 --mem-limit 24 --timeout 100 \
  $([ -z "$REDO" ] && echo --pending) ${TASKS:+--tasks $TASKS} > $OUT/validate.txt 2>&1
echo "exit $?" >> $OUT/validate.txt
kill $monitor; sleep 2; cp runs/tritonbench-validation.json $OUT/
pkill -KILL -f -- "-m fitness\." 2>/dev/null
tail -40 $OUT/validate.txt
