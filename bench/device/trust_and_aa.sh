#!/bin/bash
# Two checks in one call, each under its own limit, output under $OUT as it comes:
# 1. the GPU tests: the evaluator's exploit set (tests/test_exploits.py) and the device-draw and
#    timing tests, at the working tree;
# 2. TritonBench A/A alone: bench/evaluator_bench.py over the 12-task sample, one steady round,
#    then each task's starting kernel timed against its baseline one at a time (nothing else on
#    the GPU), quoted as "A/A noise (alone, ...)".
# TESTS_S, AA_S: the two parts' limits (defaults 290 s, 240 s).
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
timeout -s KILL ${TESTS_S:-290} python -m pytest -q -p no:cacheprovider tests/test_exploits.py tests/test_device_draws.py \
  tests/test_timing.py > $OUT/gpu-tests.txt 2>&1; echo "exit $?" >> $OUT/gpu-tests.txt
pkill -KILL -f -- "-m fitness\." 2>/dev/null
T=matmul_leakyrelu,triton_argmax,softmax_triton3,lightning_attention,triton_attention,sgmv_expand_slice,rotary_emb,square_matrix,l2_norm_triton2,int8_quantization,geglu_tanh_triton,kldiv_compute
timeout -s KILL ${AA_S:-240} python bench/evaluator_bench.py --suite tritonbench --tasks $T --workers 8 --rounds 1 \
  --json $OUT/aa.json > $OUT/aa.txt 2>&1; echo "exit $?" >> $OUT/aa.txt
pkill -KILL -f -- "-m fitness\." 2>/dev/null
tail -3 $OUT/gpu-tests.txt; grep -A30 "^task " $OUT/aa.txt | tail -22
