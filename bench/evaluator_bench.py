"""Evaluator benchmark (GPU): throughput end to end, and A/A timing noise.

    python bench/evaluator_bench.py [--workers 8] [--tasks a,b] [--json OUT]

1. Throughput: every builtin starting kernel evaluated as a candidate, correctness on the tuning
   and held-out shapes under two seeds, then timing against the PyTorch reference. Reported
   twice: cold (fresh workers and Triton cache, float64 references and inputs made on the way),
   then steady state: --rounds variants of every kernel that must compile afresh, in the same
   evaluator, as in a long run where each task sees many candidates.
2. A/A: each starting kernel timed as a candidate against itself (--baseline start); the noise is
   the median over tasks of |speedup - 1|.
Not a test: numbers depend on the machine. Quote its output.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fitness.evaluator import EvalConfig, Evaluator  # noqa: E402
from fitness.reference import ReferenceCache  # noqa: E402
from fitness.verdict import geomean  # noqa: E402
from suites.registry import load_suite  # noqa: E402


def variant(source: str, n: int) -> str:
    """The same kernel with a comment inside its body: Triton hashes the kernel's source, so the
    variant compiles afresh, as a new candidate would."""
    lines = source.splitlines()
    i = next(k for k, line in enumerate(lines) if "tl.program_id(0)" in line)
    lines[i] += f"  # variant {n}"  # at the end of the line: mid-line it would comment code out
    return "\n".join(lines) + "\n"


def _sum_phases(total: dict[str, float], phases: dict, prefix: str) -> None:
    """Adds seconds per phase; nested dicts (a worker's own phases, in ms) become dotted names.
    (At f303be2 the bench added those dicts as numbers: the TypeError in run_pass.)"""
    for k, x in phases.items():
        if isinstance(x, dict):
            scale = 1e-3 if k.endswith("_ms") else 1.0
            _sum_phases(total, {kk: xx * scale for kk, xx in x.items()}, f"{prefix}{k.removesuffix('_ms')}.")
        elif isinstance(x, (int, float)):
            total[prefix + k] = total.get(prefix + k, 0.0) + x


def run_pass(ev, tasks, label, n=0):
    t0 = time.monotonic()
    verdicts = ev.evaluate_many([(t, variant(t.start_source, n + i)) for i, t in enumerate(tasks)])
    wall = time.monotonic() - t0
    busy = sum(v.elapsed_s for v in verdicts)
    config = ev.config
    per_min = 60 * len(verdicts) / wall
    phases: dict[str, float] = {}
    for v in verdicts:
        _sum_phases(phases, v.phases, "")
        for row in v.times:
            _sum_phases(phases, {k: x / 1e3 for k, x in row.get("phase_ms", {}).items()}, "timing.")
    print(f"[{label}] summed phase seconds: " + ", ".join(f"{k} {x:.1f}" for k, x in sorted(phases.items())))
    print(f"[{label}] {len(verdicts)} candidates in {wall:.1f} s = {per_min:.1f} candidates/min "
          f"({config.workers} correctness workers; summed per-candidate latency {busy:.0f} s)")
    return verdicts, wall, per_min


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--tasks", default=None)
    ap.add_argument("--trials", type=int, default=21)
    ap.add_argument("--rounds", type=int, default=3,
                    help="steady state: variants of every task, evaluated together")
    ap.add_argument("--json", default=None, help="write every verdict here")
    args = ap.parse_args()
    suite = load_suite("builtin")
    tasks = [suite[n] for n in args.tasks.split(",")] if args.tasks else list(suite.values())
    refs = ReferenceCache(16 << 30, "cuda" if torch.cuda.is_available() else "cpu")  # as the evaluator's own
    out = {}

    with tempfile.TemporaryDirectory() as cache:
        cfg = EvalConfig(workers=args.workers, trials=args.trials, triton_cache=cache)
        with Evaluator(cfg, refs) as ev:
            cold, _, cold_rate = run_pass(ev, tasks, "cold: fresh workers, references, inputs, compile, check, time")
            warm, _, warm_rate = run_pass(ev, tasks * args.rounds,
                                          "steady state: new kernel variants (compile, check, time)", 1)
            warm = warm[:len(tasks)]
    out["throughput"] = {"cold_per_min": cold_rate, "steady_per_min": warm_rate}

    with Evaluator(EvalConfig(workers=args.workers, trials=args.trials, baseline="start"), refs) as ev:
        aa, _, _ = run_pass(ev, tasks, "A/A (each starting kernel against itself)")
    print(f"\n{'task':24} {'stage':7} {'vs torch':>9} {'A/A':>7}  method")
    noise = []
    for v, a in zip(warm, aa):
        sp = f"{v.speedup:.3f}" if v.speedup else "-"
        aa_s = f"{a.speedup:.3f}" if a.speedup else "-"
        if a.speedup:
            noise.append(abs(a.speedup - 1))
        methods = "/".join(sorted({r["method"] for r in v.times}))
        print(f"{v.task:24} {v.stage:7} {sp:>9} {aa_s:>7}  {methods or v.reason.splitlines()[0][:60]}")
    timed = [v.speedup for v in warm if v.speedup]
    if timed:
        print(f"\ngeomean speedup of the starting kernels vs PyTorch: "
              f"{geomean(timed):.3f} over {len(timed)} tasks")
    if noise:
        print(f"A/A noise: median |speedup - 1| = {100 * statistics.median(noise):.2f}% "
              f"(max {100 * max(noise):.2f}%) over {len(noise)} tasks")
    out["aa_median_abs_dev"] = statistics.median(noise) if noise else None
    print(f"throughput: {cold_rate:.1f}/min cold, {warm_rate:.1f}/min steady state")
    if args.json:
        out["verdicts"] = {"vs_reference": [v.to_dict() for v in warm], "aa": [a.to_dict() for a in aa],
                           "cold": [v.to_dict() for v in cold]}
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
