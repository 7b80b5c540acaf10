#!/bin/bash
# Issue 16 on one GPU: the evaluator bench on a TritonBench sample, then a 14-task search with
# --islands 2 for about 5 minutes (its closing line: evaluations/min, busy shares, A/A sentinels).
# The search is killed after its closing line, during the export's re-timing.
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
timeout -s KILL ${BENCH_LIMIT:-180} python bench/evaluator_bench.py --suite tritonbench --sample 12 --workers 8 --rounds 2 --no-aa > $OUT/tb-bench.txt 2>&1; echo "exit $?" >> $OUT/tb-bench.txt
T=matmul_leakyrelu,triton_argmax,softmax_triton3,lightning_attention,triton_attention,sgmv_expand_slice,rotary_emb,square_matrix,l2_norm_triton2,int8_quantization,cross_entropy2,attn_fwd_causal,geglu_tanh_triton,kldiv_compute
timeout -s KILL ${SEARCH_LIMIT:-330} python run.py --suite tritonbench --tasks $T --islands 2 --population 4 --workers 8 --mem-limit 24 --time-limit ${SEARCH_S:-270} --archive /tmp/tb.db > $OUT/tb-search.txt 2>&1; echo "exit $?" >> $OUT/tb-search.txt
