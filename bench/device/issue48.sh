#!/bin/bash
# Issue 48 ("The replay owns the call") on one GPU, in steps named by STEP (comma separated), each
# sized to fit one device call:
#   tests   the GPU runs of the call-model tests: the memo exploit against its honest twin, the
#           trace and v4 (input sniffing) exploits, the honest calls, the suite's destination call
#   after   validate --suite tritonbench, timed, on 40 tasks drawn with SEED (printed), this commit
#   before  the same tasks at 8ae4158, from a worktree carried as .before
#             (git worktree add .before 8ae4158; echo /.before/ >> .git/info/exclude)
#   recheck the tasks the "after" run lost to the engine (a baseline child's scramble graph raising
#           "Offset increment outside graph capture"; uniform_sampling's try-alias helper;
#           bmm_chunk_bwd's specialized argument), validated again after their fixes
#   bench   bench/evaluator_bench.py --workers 12 on builtin, this commit and 8ae4158, the GPU's memory
#           sampled every 2 s
#   planted the planted-binary exploit against its honest twin, judged by this commit and by 8ae4158
# carry: [".whl", ".suites", ".before"]. LIMIT: each validate's own limit in seconds (default 420).
cd "$(dirname "$0")/../.." && ROOT=$PWD
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH \
  TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
SEED=${SEED:-48}
TASKS=$(python bench/sample_tasks.py --suite tritonbench --n 40 --seed "$SEED" 2> "$OUT/sample.txt")
cat "$OUT/sample.txt"
memory() {  # the GPU's used memory every 2 s, and its peak at the end
  (while sleep 2; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; done) > "$OUT/gpu-mem-$1.txt" &
  echo $!
}
for step in ${STEP//,/ }; do
  case $step in
    tests)
      timeout 300 python -m pytest -q -p no:cacheprovider -m "" \
        "tests/test_exploits_v3_timing.py::test_a_kernel_that_remembers_its_answers_is_timed_as_its_honest_twin" \
        tests/test_exploits_v3_trace.py tests/test_exploits_v4.py tests/test_honest_calls.py tests/test_script_replay.py \
        tests/test_call_model.py tests/test_gpu_memory.py \
        > "$OUT/tests.txt" 2>&1
      echo "exit $?" >> "$OUT/tests.txt"; tail -25 "$OUT/tests.txt";;
    after|before)
      dir=.; [ "$step" = before ] && dir=.before
      m=$(memory "$step")
      (cd $dir && timeout -s TERM "${LIMIT:-420}" python run.py validate --suite tritonbench --workers 8 \
        --mem-limit 24 --timeout 100 --tasks "$TASKS" --validation "$OUT/validation-$step.json" \
        > "$OUT/validate-$step.txt" 2>&1; echo "exit $?" >> "$OUT/validate-$step.txt")
      kill "$m"; pkill -KILL -f -- "-m fitness\." 2>/dev/null; sleep 2
      echo "peak GPU memory (MiB): $(sort -n "$OUT/gpu-mem-$step.txt" | tail -1)" >> "$OUT/validate-$step.txt"
      tail -30 "$OUT/validate-$step.txt";;
    recheck)
      timeout 150 python run.py validate --suite tritonbench --workers 8 --mem-limit 24 --timeout 100 \
        --tasks batched_vecmat_mult,diag_ssm_triton,fast_rms_layernorm,uniform_sampling,bmm_chunk_bwd,chunked_cumsum_fwd,fast_rope_embedding \
        --validation "$OUT/validation-recheck.json" > "$OUT/validate-recheck.txt" 2>&1
      tail -14 "$OUT/validate-recheck.txt";;
    planted)
      for dir in . .before; do
        [ -d "$dir/fitness" ] || continue
        echo "== evaluator of $dir" >> "$OUT/planted.txt"
        (cd $dir && timeout 120 python "$ROOT/bench/twin_gap.py" --task softmax --file \
          "$ROOT/tests/exploits/v4/planted_binary.py" --switch "PLANT = True" "PLANT = False" >> "$OUT/planted.txt" 2>&1)
      done
      cat "$OUT/planted.txt";;
    bench)  # this commit, then 8ae4158 (.before, where carried), 12 workers each, the GPU's memory sampled
      for dir in . .before; do
        [ -d "$dir/fitness" ] || continue
        tag=$([ "$dir" = . ] && echo after || echo before)
        m=$(memory "bench-$tag")
        (cd $dir && timeout 200 python bench/evaluator_bench.py --workers 12 --rounds 1 --no-aa \
          > "$OUT/bench-$tag.txt" 2>&1; echo "exit $?" >> "$OUT/bench-$tag.txt")
        kill "$m"; pkill -KILL -f -- "-m fitness\." 2>/dev/null; sleep 2
        echo "peak GPU memory (MiB): $(sort -n "$OUT/gpu-mem-bench-$tag.txt" | tail -1)" >> "$OUT/bench-$tag.txt"
        tail -32 "$OUT/bench-$tag.txt"
      done;;
  esac
done
