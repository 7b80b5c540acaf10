#!/bin/bash
# The evaluator bench on builtin, the evaluator at f303be2 (git archive in .before/, carried) and
# HEAD, one after the other on the same machine: candidates/min cold and steady, A/A noise.
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
R=${ROUNDS:-4}
# a builtin kernel through the whole cascade, every reason printed (a replay that fails shows why)
[ -n "$PROBE" ] && timeout -s KILL 120 python bench/replay_probe.py softmax > $OUT/probe.txt 2>&1
if [ -d .before ] && [ -z "$SKIP_BEFORE" ]; then
  (cd .before && timeout -s KILL ${LIMIT:-240} python bench/evaluator_bench.py --workers 8 --rounds $R > $OUT/bench-before.txt 2>&1; echo "exit $?" >> $OUT/bench-before.txt)
fi
timeout -s KILL ${LIMIT:-240} python bench/evaluator_bench.py --workers 8 --rounds $R > $OUT/bench-head.txt 2>&1; echo "exit $?" >> $OUT/bench-head.txt
# HEAD with more correctness slots (EXTRA="12 16"): steady rate only, no A/A pass
for w in $EXTRA; do
  timeout -s KILL ${LIMIT:-240} python bench/evaluator_bench.py --workers $w --rounds $R --no-aa > $OUT/bench-head-w$w.txt 2>&1; echo "exit $?" >> $OUT/bench-head-w$w.txt
done
