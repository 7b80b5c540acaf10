#!/bin/bash
# call E (2 GPUs): builtin search with --cluster gpus on 1 GPU, then on both (after a warm-up of the compile cache)
cd "$(dirname "$0")/../.."
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name --format=csv,noheader > $OUT/gpus.txt; nproc >> $OUT/gpus.txt
B="python run.py --suite builtin --islands 2 --workers 8 --cluster gpus"
timeout 130 $B --time-limit 45 --archive /tmp/warm.db > $OUT/e-warm.txt 2>&1; echo "exit $?" >> $OUT/e-warm.txt
CUDA_VISIBLE_DEVICES=0 timeout 190 $B --time-limit 120 --archive /tmp/b1.db > $OUT/e-b1.txt 2>&1; echo "exit $?" >> $OUT/e-b1.txt
CUDA_VISIBLE_DEVICES=0,1 timeout 190 $B --time-limit 120 --archive /tmp/b2.db > $OUT/e-b2.txt 2>&1; echo "exit $?" >> $OUT/e-b2.txt
python run.py report --archive /tmp/b2.db --out /tmp/rep2 > /dev/null 2>&1; grep -A6 -i "per device" /tmp/rep2/summary.md > $OUT/e-b2-report.txt
