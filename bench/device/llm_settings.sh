#!/bin/bash
# Issue 17 on one GPU: both LLM settings end to end on 12 TritonBench tasks through
# --llm-exchange, each round's requests answered by bench/exchange_answer.py (the task's starting
# kernel, made distinct: no model on the node), then each run's report. Output under $OUT.
# DEADLINE (seconds, default 540) bounds the whole script: a device call that overruns returns
# nothing, so each round gets at most what is left, less LAST_S kept for the report.
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
export OPENAI_API_KEY=EMPTY
T=${TASKS:-matmul_leakyrelu,triton_argmax,softmax_triton3,rotary_emb,square_matrix,l2_norm_triton2,int8_quantization,geglu_tanh_triton,kldiv_compute,add_value,softmax_triton1,swiglu_triton}
end=$((SECONDS + ${DEADLINE:-540}))
for setting in ${SETTINGS:-optimize instruction}; do
  log=$OUT/$setting.txt; ex=/tmp/ex-$setting
  for round in $(seq 1 ${ROUNDS:-3}); do
    left=$((end - SECONDS - ${LAST_S:-25}))
    limit=$(( left < ${ROUND_LIMIT:-150} ? left : ${ROUND_LIMIT:-150} ))
    [ $limit -gt 20 ] || { echo "+ out of time before round $round" >> $log; break; }
    echo "+ round $round (limit ${limit}s)" >> $log
    timeout -s KILL $limit python run.py --suite tritonbench --tasks $T --setting $setting --model stub \
      --llm-exchange $ex --islands 2 --population 2 --generations ${GENS:-2} --workers 8 --mem-limit 24 --aa-every 0 \
      --archive /tmp/$setting.db >> $log 2>&1
    rc=$?; echo "exit $rc" >> $log
    [ $rc -eq 3 ] || break
    python bench/exchange_answer.py $ex --suite tritonbench >> $log 2>&1
  done
  python run.py report --archive /tmp/$setting.db --out $OUT/report-$setting >> $log 2>&1
  tail -25 $log
done
