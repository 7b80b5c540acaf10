#!/bin/bash
# Issue 16's GPU figures at the working tree, in one or two calls: STEPS (comma list, in order) of
#   search    the 14-task TritonBench search, --islands 2, SEARCH_S of search (default 280), then
#             where each measuring turn went (bench/turn_phases.py); killed during the export
#   builtin   the evaluator bench on builtin, steady state and phase table (--no-aa)
#   tbbench   the evaluator bench on the 12-task TritonBench sample, cold, steady, phase table and
#             then each starting kernel against its baseline alone (A/A alone)
#   validate  `validate --suite tritonbench` again for VTASKS (the record starts empty here)
#   gputests  the GPU-marked tests of the exploit set, device draws, timing, trace and launch configs
#   v3tests   issue 39: every test of the fail-closed exploit set (tests/test_exploits_v3_*.py) and
#             the timing tests, on the GPU
#   builtin_before, tbbench_before  the two benches in .before/ (`git archive BASE`, carried)
# V3_TESTS, BUILTIN_ARGS (default --rounds 3 --no-aa), V3_S, BUILTIN_S: what those steps run, and their limits
# DEADLINE (default 540 s) bounds the whole script: a device call that overruns returns nothing,
# so each step gets at most what is left less 15 s. Output under $OUT as it comes.
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
end=$((SECONDS + ${DEADLINE:-540}))
limit() {  # the step's own limit, or what is left of the deadline if less
  left=$((end - SECONDS - 15)); echo $(( left < $1 ? left : $1 ))
}
step() {  # name, own limit, command...: run it under its limit, its output in $OUT/name.txt
  name=$1; own=$2; shift 2
  lim=$(limit $own)
  [ "$lim" -gt 20 ] || { echo "$name: out of time" | tee -a $OUT/steps.txt; return; }
  echo "$name: start at ${SECONDS}s, limit ${lim}s" >> $OUT/steps.txt
  timeout -s KILL $lim "$@" > $OUT/$name.txt 2>&1; echo "exit $?" >> $OUT/$name.txt
  pkill -KILL -f -- "-m fitness\." 2>/dev/null; sleep 2  # its children, before the next step
  echo "$name: done at ${SECONDS}s" >> $OUT/steps.txt
}
T12=matmul_leakyrelu,triton_argmax,softmax_triton3,lightning_attention,triton_attention,sgmv_expand_slice,rotary_emb,square_matrix,l2_norm_triton2,int8_quantization,geglu_tanh_triton,kldiv_compute
T14=$T12,cross_entropy2,attn_fwd_causal
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/steps.txt; git log -1 --format=%h >> $OUT/steps.txt 2>/dev/null
IFS=',' read -ra STEP_LIST <<< "${STEPS:?STEPS=search,builtin,...}"
for s in "${STEP_LIST[@]}"; do
  case $s in
    search)
      step search $(( ${SEARCH_S:-280} + 50 )) python run.py --suite tritonbench --tasks $T14 --islands 2 --population 4 \
        --workers 8 --mem-limit 24 --time-limit ${SEARCH_S:-280} --archive /tmp/tb.db
      python bench/turn_phases.py /tmp/tb.db > $OUT/turn.txt 2>&1 ;;
    v3tests)
      step v3tests ${V3_S:-300} python -m pytest -q -p no:cacheprovider -rfs \
        ${V3_TESTS:-tests/test_exploits_v3_*.py tests/test_timing.py tests/test_timing_v3.py} ;;
    builtin_before) (cd .before && step builtin_before ${BUILTIN_S:-200} python bench/evaluator_bench.py --workers 8 \
      ${BUILTIN_ARGS:---rounds 3 --no-aa}) ;;
    tbbench_before) (cd .before && TRITON_EVOLVE_DATA=$PWD/../.suites step tbbench_before 300 python bench/evaluator_bench.py \
      --suite tritonbench --tasks $T12 --workers 8 --rounds 3) ;;
    builtin) step builtin ${BUILTIN_S:-200} python bench/evaluator_bench.py --workers 8 ${BUILTIN_ARGS:---rounds 3 --no-aa} ;;
    tbbench) step tbbench 300 python bench/evaluator_bench.py --suite tritonbench --tasks $T12 --workers 8 --rounds 3 ;;
    validate)
      step validate 200 python run.py validate --suite tritonbench --workers 8 --mem-limit 24 --timeout 100 \
        --tasks ${VTASKS:-f8_conversion_utils,multinomial_sampling}
      cp runs/tritonbench-validation.json $OUT/ 2>/dev/null ;;
    gputests)
      step gputests 300 python -m pytest -q -p no:cacheprovider -m gpu tests/test_launch_configs.py tests/test_trace.py \
        tests/test_timing.py tests/test_device_draws.py tests/test_exploits.py ;;
    *) echo "unknown step $s" >> $OUT/steps.txt ;;
  esac
done
cat $OUT/steps.txt
