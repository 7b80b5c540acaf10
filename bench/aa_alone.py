"""A/A alone, pass by pass, with every round of trials logged (GPU): where an A/A stray comes from.

    python bench/aa_alone.py --tasks a,b,... [--workers 8] [--passes engine,engine,full] [--log OUT.jsonl]

First every task's starting kernel is evaluated at once (the GPU loaded, as in a search: the
baseline's kept trials of each shape are taken under that load). Then each pass times every
task's starting kernel against itself, one task at a time (nothing else evaluated). A pass is
"engine" (the evaluator as it is) or "full" (the baseline's kept trials ignored: both sides
alternate fully). Each round of trials goes to --log as it ends: the shape, whether it tracked
(the baseline's kept trials stood for the rest), both sides' times, and the other children busy
at its start and end (correctness and clean slots held, spares being started). Per pass it prints
the A/A noise (median, p90, max of |A/A - 1| over tasks) and each shape off parity by over 3%.
Not a test: quote its output.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fitness.engine.measuring as measuring  # noqa: E402
from archives.metrics import aa_noise  # noqa: E402
from fitness.engine.evaluator import EvalConfig, Evaluator  # noqa: E402
from fitness.engine.pool import WorkerPool  # noqa: E402
from fitness.engine.trials import Draws  # noqa: E402
from suites.registry import SuiteError, load_suite, select  # noqa: E402

CONTEXT = threading.local()


def load(ev: Evaluator) -> dict[str, int]:
    """Slots held and spares being started, per pool: what else may be on the GPU now."""
    pools: dict[str, WorkerPool | None] = {"correctness": ev.pool, "clean": ev.timer,
                                           "reference": ev.ref_service.pool if ev.ref_service else None}
    out = {}
    for name, pool in pools.items():
        if pool is not None:
            out[f"{name}_held"] = pool.size - pool._idle
            out[f"{name}_starting"] = pool._filling
    return out


def install(ev: Evaluator, log: IO[str], full: list[bool]) -> None:
    """Wraps the turn's rounds of trials (fitness.engine.measuring.alternate) and its choice of the
    baseline's kept trials; `full[0]` true makes every shape alternate fully."""
    alternate, timed_trials, kept = measuring.alternate, measuring.MeasuringTurn._timed_trials, \
        measuring.MeasuringTurn._kept
    t0 = time.monotonic()

    def logged(sides: dict, n: int, passes: int, spent: dict, config: EvalConfig, draws: Draws,
               track: bool = False) -> dict:
        before, start = load(ev), time.monotonic() - t0
        times = alternate(sides, n, passes, spent, config, draws, track)
        rec = {**getattr(CONTEXT, "shape", {}), "t": round(start, 3), "track": track, "n_sets": n,
               "passes": passes, "c": times["c"], "b": times["b"], "load_start": before, "load_end": load(ev)}
        log.write(json.dumps(rec) + "\n")
        log.flush()
        return times

    def traced(self: measuring.MeasuringTurn, plan: dict, sides: dict, how: tuple, draws: Draws,
               reuse: bool = True) -> dict:
        CONTEXT.shape = {"task": plan["key"].task, "shape": plan["case"]["shape"], "epoch": plan["epoch"]["id"]}
        return timed_trials(self, plan, sides, how, draws, reuse)

    def chosen(self: measuring.MeasuringTurn, plan: dict, how: tuple) -> list[float] | None:
        return None if full[0] else kept(self, plan, how)

    measuring.alternate = logged  # type: ignore[assignment]
    measuring.MeasuringTurn._timed_trials = traced  # type: ignore[method-assign]
    measuring.MeasuringTurn._kept = chosen  # type: ignore[method-assign]


def summary(label: str, verdicts: list, wall: float) -> dict:
    noise = [abs(v.speedup - 1) for v in verdicts if v.speedup]
    if not noise:
        print(f"[{label}] nothing timed", flush=True)
        return {}
    median, p90 = aa_noise([1 + x for x in noise]) or (0.0, 0.0)
    print(f"[{label}] A/A noise (alone, {wall:.0f} s): median |A/A - 1| = {100 * median:.2f}%, p90 {100 * p90:.2f}% "
          f"(max {100 * max(noise):.2f}%) over {len(noise)} tasks", flush=True)
    for v in verdicts:
        for r in v.times:
            if r.speedup is not None and abs(r.speedup - 1) > 0.03:
                print(f"[{label}]   {v.task} {r.shape} A/A {r.speedup:.3f}: "
                      f"candidate {r.candidate_ms * 1e3:.2f} us "
                      f"(spread {r.candidate_spread:.3f}, {r.trials} trials), baseline "
                      f"{r.baseline_ms * 1e3:.2f} us (spread {r.baseline_spread:.3f}, {r.baseline_trials} "
                      f"trials, kept {r.baseline_kept})", flush=True)
    return {"median": median, "p90": p90, "max": max(noise),
            "tasks": {v.task: v.speedup for v in verdicts}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="tritonbench")
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--passes", default="engine,engine,full")
    ap.add_argument("--log", default="aa-trials.jsonl")
    ap.add_argument("--json", default=None, help="each pass's figures")
    args = ap.parse_args()
    passes = args.passes.split(",")
    if not set(passes) <= {"engine", "full"}:
        sys.exit("error: --passes takes engine and full, comma-separated")
    try:  # an unknown suite or task: the registry's one-line error, as run.py gives it
        tasks = list(select(load_suite(args.suite), args.tasks).values())
    except SuiteError as e:
        sys.exit(f"error: {e}")
    out: dict = {}
    full = [False]
    with tempfile.TemporaryDirectory() as cache, open(args.log, "w") as log:
        with Evaluator(EvalConfig(workers=args.workers, triton_cache=cache)) as ev:
            install(ev, log, full)
            t0 = time.monotonic()
            loaded = ev.evaluate_many([(t, t.start_source) for t in tasks])
            print(f"[loaded] {len(loaded)} starting kernels at once in {time.monotonic() - t0:.0f} s, "
                  f"{sum(v is not None and v.speedup is not None for v in loaded)} timed", flush=True)
            for i, how in enumerate(passes):
                full[0] = how == "full"
                t0 = time.monotonic()
                verdicts = [ev.evaluate(t, t.start_source, aa=True) for t in tasks]
                out[f"{i + 1}-{how}"] = summary(f"pass {i + 1} {how}", [v for v in verdicts if v],
                                                time.monotonic() - t0)
                if args.json:
                    Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
