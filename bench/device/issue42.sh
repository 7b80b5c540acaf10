#!/bin/bash
# Issue 42 (scale-out on several GPUs) in two calls: STEPS (comma list, in order) of
#   scale  the same builtin search, then a 14-task TritonBench search, with --cluster gpus on every
#          visible GPU and then on GPU 0 alone (that order: the one-GPU runs find the compile
#          caches warm, so the ratio is if anything understated); SCALE_S of search each (default
#          60); each run's closing line and the report's per-device table
#   hand   the README's recipe by hand: `dask scheduler`, one `triton-evolve-worker ADDRESS
#          --workers 8 --gpus G` per GPU (each in its own session, as on its own node), then A/A
#          across devices over them (bench/aa_devices.py), then a builtin search on
#          `--cluster tcp://...` in which GPU 3's worker (the last GPU's) is SIGKILLed after
#          KILL_AT evaluations; its closing line and the archive's counts
# WORKERS (default 8): --workers everywhere. DEADLINE (default 480 s) bounds the script; each step
# gets at most what is left of it less 15 s.
# $OUT/log has the lines that matter as they come; $OUT/full.tgz every step's whole output.
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PWD:$PYTHONPATH PATH=/tmp/site/bin:/tmp/bw/usr/bin:$PATH \
  TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
end=$((SECONDS + ${DEADLINE:-480}))
D=/tmp/i42; mkdir -p $D
log() { echo "$*" | tee -a $OUT/log; }
save() { tar czf $OUT/full.tgz -C $D . 2>/dev/null; }
limit() { left=$((end - SECONDS - 15)); echo $(( left < $1 ? left : $1 )); }
run_step() {  # name, own limit, command...: in its own process group, killed whole at its end
  local name=$1 own=$2; shift 2
  local lim; lim=$(limit $own)
  [ "$lim" -gt 20 ] || { log "$name: out of time"; return 1; }
  log "== $name (at ${SECONDS}s, limit ${lim}s): $*"
  setsid timeout -s KILL $lim "$@" > $D/$name.txt 2>&1 &
  local pid=$!; wait $pid; local rc=$?
  kill -KILL -- -$pid 2>/dev/null; sleep 1
  grep -E "evaluations in|^Traceback|Error|error:" $D/$name.txt | tail -4 | tee -a $OUT/log
  log "$name: exit $rc at ${SECONDS}s"; save
}
per_device() {  # the report's per-device table of an archive
  python run.py report --archive $1 --out $D/rep-$2 > /dev/null 2>&1
  awk '/^#+ Per device/{p=1} p&&/^#+ /&&!/Per device/{p=0} p' $D/rep-$2/summary.md | tee -a $OUT/log
}
counts() {  # candidates against evaluations; verdicts per unit; any failed for killed units
  python - "$1" <<'PY' | tee -a $OUT/log
import json, sqlite3, sys
from collections import Counter
c = sqlite3.connect(sys.argv[1])
q = lambda s: c.execute(s).fetchone()[0]
print("archive:", q("select count(*) from candidates"), "candidates,", q("select count(*) from evaluations"),
      "evaluations,", q("select count(*) from candidates where id not in (select candidate_id from evaluations)"),
      "candidates without one,", q("select count(*) from evaluations where flags like '%killed-units%'"),
      "failed for killed units; run status", q("select status from runs order by id desc"))
units = Counter(json.loads(v).get("unit", "?").rsplit(":", 1)[0] for (v,) in c.execute("select verdict from evaluations"))
print("verdicts by unit:", dict(sorted(units.items())))
PY
}
hand() {  # the README's recipe by hand, A/A across its units, then a search with one worker killed
  mkdir -p $D/bin  # the console script pip would write for triton-evolve-worker (no pip install there)
  printf '#!/usr/bin/env python3\nimport sys\nfrom fitness.engine.cluster import worker_main\nif __name__ == "__main__":\n    sys.exit(worker_main())\n' \
    > $D/bin/triton-evolve-worker; chmod +x $D/bin/triton-evolve-worker; export PATH=$D/bin:$PATH
  local A=tcp://127.0.0.1:8786 g n=0 w=()
  log "== hand (at ${SECONDS}s): dask scheduler --port 8786; triton-evolve-worker $A --workers $W --gpus G, G in $ALL"
  setsid dask scheduler --port 8786 > $D/scheduler.txt 2>&1 & local sched=$!
  for _ in $(seq 60); do grep -q "Scheduler at" $D/scheduler.txt && break; sleep 0.5; done
  for g in ${ALL//,/ }; do
    setsid triton-evolve-worker $A --workers $W --gpus $g > $D/worker$g.txt 2>&1 & w[$g]=$!; n=$((n + 1))
  done
  for _ in $(seq 120); do [ "$(cat $D/worker*.txt | grep -c joined)" -ge $n ] && break; sleep 1; done
  cat $D/worker*.txt | grep joined | tee -a $OUT/log
  [ "$(cat $D/worker*.txt | grep -c joined)" -ge $n ] || { log "hand: not every worker joined"; tail -5 $D/worker*.txt; save; }
  run_step aa-devices 150 python bench/aa_devices.py --cluster $A --workers $W --rounds ${AA_ROUNDS:-2} ${AA_TASKS:+--tasks $AA_TASKS}
  grep -E "^unit|spread" $D/aa-devices.txt | tee -a $OUT/log
  (  # the killer: GPU $LAST's worker, its whole session, once KILL_AT evaluations are in
    for _ in $(seq 400); do
      k=$(python -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from evaluations').fetchone()[0])" \
          $D/hand.db 2>/dev/null || echo 0)
      [ "$k" -ge "${KILL_AT:-40}" ] && break; sleep 0.5
    done
    log "killing worker --gpus $LAST (pid ${w[$LAST]}, its session) at ${SECONDS}s, $k evaluations in the archive"
    kill -KILL -- -${w[$LAST]}
  ) &
  local killer=$!
  run_step hand-search 170 python run.py --suite builtin --tasks ${HAND_TASKS:-attention,bias_gelu,cross_entropy,cumsum,embedding,fused_residual_rmsnorm,int8_dequant,int8_quant,layernorm,matmul} \
    --islands 2 --population 4 --generations 2 --workers $W --time-limit ${HAND_S:-110} --cluster $A --archive $D/hand.db
  kill $killer 2>/dev/null
  counts $D/hand.db; per_device $D/hand.db hand
  for g in ${ALL//,/ }; do kill -KILL -- -${w[$g]} 2>/dev/null; done; kill -KILL -- -$sched 2>/dev/null
  save
}
nvidia-smi --query-gpu=index,name --format=csv,noheader | tee -a $OUT/log; log "cores $(nproc); commit $(git log -1 --format=%h 2>/dev/null)"
ALL=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd,); LAST=${ALL##*,}
T14=matmul_leakyrelu,triton_argmax,softmax_triton3,lightning_attention,triton_attention,sgmv_expand_slice,rotary_emb,square_matrix,l2_norm_triton2,int8_quantization,cross_entropy2,attn_fwd_causal,geglu_tanh_triton,kldiv_compute
S=${SCALE_S:-60}; W=${WORKERS:-8}
IFS=',' read -ra STEP_LIST <<< "${STEPS:?STEPS=scale,hand}"
for s in "${STEP_LIST[@]}"; do
  case $s in
    scale)
      B=(python run.py --suite builtin --islands 4 --workers $W --cluster gpus --time-limit $S)
      TB=(python run.py --suite tritonbench --tasks $T14 --islands 4 --population 4 --workers $W --mem-limit 24
          --cluster gpus --time-limit $S)
      CUDA_VISIBLE_DEVICES=$ALL run_step builtin-all $((S + 70)) "${B[@]}" --archive $D/b-all.db; per_device $D/b-all.db b-all
      CUDA_VISIBLE_DEVICES=0 run_step builtin-gpu0 $((S + 70)) "${B[@]}" --archive $D/b-one.db
      CUDA_VISIBLE_DEVICES=$ALL run_step tb-all $((S + 80)) "${TB[@]}" --archive $D/t-all.db; per_device $D/t-all.db t-all
      CUDA_VISIBLE_DEVICES=0 run_step tb-gpu0 $((S + 80)) "${TB[@]}" --archive $D/t-one.db ;;
    hand) hand ;;
    *) log "unknown step $s" ;;
  esac
done
save
