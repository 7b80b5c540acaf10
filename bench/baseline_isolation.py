"""Does a candidate that changes global torch state at import change the baseline's time?
Times the softmax starting kernel, then candidates that leave a slow dispatch mode, a
torch.library override of aten::_softmax and disabled SDP backends behind, then the starting
kernel again; prints each verdict's per-shape baseline times (GPU)."""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fitness.engine.evaluator import EvalConfig, Evaluator  # noqa: E402
from suites.registry import load_suite  # noqa: E402

suite = load_suite("builtin")
task = suite["softmax"]
order = [("start", task.start_source)] + [(n, (ROOT / "tests/exploits" / f"{n}.py").read_text())
                                          for n in ("slow_dispatch_mode", "aten_softmax_override")] + \
        [("start again", task.start_source)]
with Evaluator(EvalConfig(workers=int(os.environ.get("WORKERS", "4")))) as ev:
    for name, src in order:
        v = ev.evaluate(task, src)
        times = ", ".join(f"{r.shape}: baseline {r.baseline_ms:.4f} ms / candidate {r.candidate_ms:.4f} ms"
                          for r in v.times)
        print(f"{name:22s} passed={v.passed} speedup={v.speedup and round(v.speedup, 3)} | {times}", flush=True)
