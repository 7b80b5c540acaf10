#!/bin/bash
# The builtin evaluator bench under py-spy (carry its wheel in .whl): where the engine
# process's GIL goes (collapsed stacks, --gil; PYSPY="--idle --threads": where each thread waits too), to find what bounds the steady rate when the
# engine's CPU time nears one core. Output under $OUT as it comes.
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:/tmp/site/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
timeout -s KILL ${LIMIT:-240} py-spy record ${PYSPY:---gil} --nonblocking -r 250 -f raw -o $OUT/engine-gil.txt -- \
  python bench/evaluator_bench.py --workers 8 --rounds ${ROUNDS:-4} ${ARGS:-} > $OUT/bench.txt 2>&1; echo "exit $?" >> $OUT/bench.txt
