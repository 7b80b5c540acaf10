#!/bin/bash
# The README's "Optimize your own kernel" tutorial on a GPU: the silu_mul task file made from a
# kernel of "your code", validated, searched with the knob operators, exported, and the export
# imported by a user script on CUDA tensors. Output under $OUT (tutorial.txt).
cd "$(dirname "$0")/../.."
TE=$PWD
bash .whl/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/bw/usr/bin:$PATH TRITON_EVOLVE_DATA=$PWD/.suites PYTHONUNBUFFERED=1
LOG=$OUT/tutorial.txt
W=$(mktemp -d) && cd "$W"
python $TE/run.py new-task silu_mul > /dev/null
# the README's my_kernels.py and the edited task file, taken from the README itself
python - "$TE/README.md" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
section = text[text.index("## Optimize your own kernel"):text.index("## The public suites")]
blocks = re.findall(r"```python\n(.*?)```", section, re.S)
open("my_kernels.py", "w").write(blocks[0])
open("silu_mul.py", "w").write(blocks[1])
PY
{
  echo "+ validate"; timeout 300 python $TE/run.py validate --suite silu_mul.py --workers 4
  echo "+ search"; timeout 330 python $TE/run.py --suite silu_mul.py --islands 2 --population 4 --generations 4 \
      --workers 4 --time-limit ${SEARCH_S:-240}
  echo "+ export header"; head -12 runs/silu_mul-best/silu_mul.py
  cp runs/silu_mul-best/silu_mul.py silu_mul_fast.py
  echo "+ user script on CUDA tensors"
  python - <<'PY'
import torch, triton
from silu_mul_fast import silu_mul
from my_kernels import silu_mul as mine
a, b = torch.randn(4096, 11008, device="cuda", dtype=torch.float16), torch.randn(4096, 11008, device="cuda", dtype=torch.float16)
ref = torch.nn.functional.silu(a.float()) * b.float()
print("correct:", torch.allclose(silu_mul(a, b).float(), ref, atol=1e-2, rtol=1e-2))
t_new = triton.testing.do_bench(lambda: silu_mul(a, b)); t_old = triton.testing.do_bench(lambda: mine(a, b))
t_ref = triton.testing.do_bench(lambda: torch.nn.functional.silu(a) * b)
print(f"4096x11008 fp16: exported {t_new*1e3:.1f} us, your kernel {t_old*1e3:.1f} us, torch {t_ref*1e3:.1f} us")
PY
} > $LOG 2>&1
echo "exit $?" >> $LOG
tail -40 $LOG
