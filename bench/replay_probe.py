"""One builtin task's starting kernel (and a bench variant of it) through the evaluator, the
whole reason printed: for a failure the bench's table cuts to one line.

    python bench/replay_probe.py [TASK]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaluator_bench import variant  # noqa: E402

from fitness.engine.evaluator import EvalConfig, Evaluator  # noqa: E402
from suites.registry import load_suite  # noqa: E402


def main(name: str = "softmax") -> int:
    task = load_suite("builtin")[name]
    with Evaluator(EvalConfig(workers=2)) as ev:
        for label, src in (("start", task.start_source), ("variant", variant(task.start_source, 1))):
            v = ev.evaluate(task, src)
            assert v is not None
            print(f"{label}: stage {v.stage}, speedup {v.speedup}, flags {v.flags}\n{v.reason}\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
