#!/bin/bash
# call F (2 GPUs): a 14-task TritonBench search on 1 GPU, then on both with one unit SIGKILLed mid-run
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
T=matmul_leakyrelu,triton_argmax,softmax_triton3,lightning_attention,triton_attention,sgmv_expand_slice,rotary_emb,square_matrix,l2_norm_triton2,int8_quantization,cross_entropy2,attn_fwd_causal,geglu_tanh_triton,kldiv_compute
S="python run.py --suite tritonbench --tasks $T --islands 2 --population 4 --workers 8 --mem-limit 24 --cluster gpus"
CUDA_VISIBLE_DEVICES=0 timeout 200 $S --time-limit 130 --archive /tmp/t1.db > $OUT/f-t1.txt 2>&1; echo "exit $?" >> $OUT/f-t1.txt
(sleep 75; v=$(pgrep -f spawn_main | head -1); echo "killing unit pid $v at 75 s: $(tr '\0' ' ' < /proc/$v/environ | grep -o 'CUDA_VISIBLE_DEVICES=[0-9,]*')" >> $OUT/f-kill.txt; kill -9 $v) &
CUDA_VISIBLE_DEVICES=0,1 timeout 200 $S --time-limit 130 --archive /tmp/t2.db > $OUT/f-t2.txt 2>&1; echo "exit $?" >> $OUT/f-t2.txt
python - >> $OUT/f-kill.txt <<'PY'
import sqlite3, json
c = sqlite3.connect("/tmp/t2.db")
print("candidates", c.execute("select count(*) from candidates").fetchone()[0],
      "evaluations", c.execute("select count(*) from evaluations").fetchone()[0],
      "unevaluated", c.execute("select count(*) from candidates where id not in (select candidate_id from evaluations)").fetchone()[0])
for u in json.loads(c.execute("select units from sessions order by id desc").fetchone()[0]):
    print(u)
PY
