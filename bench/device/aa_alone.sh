#!/bin/bash
# TritonBench A/A alone, pass by pass, every round of trials logged (bench/aa_alone.py) over the
# 12-task sample of trust_and_aa.sh; output under $OUT as it comes.
# PASSES (default engine,engine,full), AA_S: the limit (default 420 s).
# PROBE_S: first bench/placement_probe.py over PROBE_TASKS under this limit (default: not run).
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
if [ -n "$PROBE_S" ]; then
  timeout -s KILL $PROBE_S python bench/placement_probe.py --tasks ${PROBE_TASKS:-triton_argmax,sgmv_expand_slice,kldiv_compute} \
    --layouts 5 --budget-s $((PROBE_S - 40)) > $OUT/placement.txt 2>&1; echo "exit $?" >> $OUT/placement.txt
  cat $OUT/placement.txt
fi
T=matmul_leakyrelu,triton_argmax,softmax_triton3,lightning_attention,triton_attention,sgmv_expand_slice,rotary_emb,square_matrix,l2_norm_triton2,int8_quantization,geglu_tanh_triton,kldiv_compute
timeout -s KILL ${AA_S:-420} python bench/aa_alone.py --tasks ${TASKS:-$T} --workers 8 --passes ${PASSES:-engine,engine,full} \
  --log $OUT/aa-trials.jsonl --json $OUT/aa-passes.json > $OUT/aa-alone.txt 2>&1; echo "exit $?" >> $OUT/aa-alone.txt
pkill -KILL -f -- "-m fitness\." 2>/dev/null
cat $OUT/aa-alone.txt | grep -v "^\s*$" | tail -40
