#!/bin/bash
# Issue 16's TritonBench search (14 tasks, --islands 2, ~270 s of search) at the working tree, and
# where each evaluation's measuring turn went (bench/turn_phases.py over the archive). Killed
# after its closing line, during the export's re-timing. Output under $OUT as it comes.
# WORKERS: correctness workers (default 8).
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
T=matmul_leakyrelu,triton_argmax,softmax_triton3,lightning_attention,triton_attention,sgmv_expand_slice,rotary_emb,square_matrix,l2_norm_triton2,int8_quantization,cross_entropy2,attn_fwd_causal,geglu_tanh_triton,kldiv_compute
timeout -s KILL ${SEARCH_LIMIT:-330} python run.py --suite tritonbench --tasks $T --islands 2 --population 4 --workers ${WORKERS:-8} \
  --mem-limit 24 --time-limit ${SEARCH_S:-270} --archive /tmp/tb.db > $OUT/tb-search.txt 2>&1; echo "exit $?" >> $OUT/tb-search.txt
python bench/turn_phases.py /tmp/tb.db > $OUT/tb-turn.txt 2>&1
