"""An exploit against its honest twin (the same file with one line switched), judged by the
evaluator of the checkout this runs from: passed, speedup, and the time of each timed shape.
Run it from an older checkout's folder (`cd .before && python ../bench/twin_gap.py ...`) to see
what that evaluator gave the same pair.

    python bench/twin_gap.py --task softmax --file tests/exploits/v4/planted_binary.py \\
        --switch "PLANT = True" "PLANT = False"
"""
import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())  # the checkout whose evaluator judges: the one this runs from

from fitness.engine.evaluator import EvalConfig, Evaluator  # noqa: E402
from suites.registry import load_suite  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", required=True, help="a builtin task")
    ap.add_argument("--file", required=True, type=Path)
    ap.add_argument("--switch", nargs=2, required=True, metavar=("EXPLOIT_LINE", "TWIN_LINE"))
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    source = args.file.read_text()
    if source.count(args.switch[0]) != 1:
        sys.exit(f"error: {args.switch[0]!r} is not in {args.file} exactly once")
    task = load_suite("builtin")[args.task]
    ev = Evaluator(EvalConfig(workers=args.workers, timeout_s=120, trials=5))
    try:
        for label, text in (("twin", source.replace(*args.switch)), ("exploit", source)):
            v = ev.evaluate(task, text)
            times = ", ".join(f"{r.shape} {r.candidate_ms:.4f} ms" for r in v.times)
            print(f"{label}: passed {v.passed} speedup {v.speedup} | {times or v.reason[:300]}", flush=True)
    finally:
        ev.close()


if __name__ == "__main__":
    main()
