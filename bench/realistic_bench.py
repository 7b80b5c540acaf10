"""Throughput on realistic candidates (issue 40): the corpus in bench/realistic/ through the real Evaluator.

    python bench/realistic_bench.py [--tasks a,b] [--limit N] [--workers 8] [--rounds 2]
                                    [--time-limit 240] [--json OUT]

The starting-kernel benches (bench/evaluator_bench.py) time the suite's own kernels; an LLM's
answers autotune over 8-32 configs, run persistent kernels and several launches per call, and
compile far more. This bench evaluates those (bench/realistic/<task>/<name>.py, LLM-style
answers for TritonBench tasks) the way a search does, and reports, in evaluator_bench's form:
1. evaluations per minute, cold (fresh children, caches, references) and steady (every candidate
   again as a variant that must compile afresh, --rounds times, in the same evaluator);
2. the summed seconds per phase, the measuring turn's busy share, the correctness workers' busy
   share, the share of correctness-worker time spent compiling and autotuning (compiling is an
   estimate: a worker's first call less its autotuning and a later call; autotuning is the launch
   hook's own count);
3. a line naming the bound (the busiest resource) and the rate per GPU against issue 40's 60/min.
--time-limit bounds both passes together: candidates not yet handed to a worker when it runs out
are dropped (the cancel path a stopping search uses), those under way finish; the rates count
finished verdicts only. On a machine without a GPU it runs too (correctness under the
interpreter, nothing timed, autotuners given a stand-in benchmark): a smoke test.
Not a test: numbers depend on the machine. Quote its output.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.evaluator_bench import bound, phase_table, run_pass, variant  # noqa: E402
from bench.realistic.corpus import Candidate, for_interpreter, load_corpus  # noqa: E402
from fitness.engine.evaluator import EvalConfig, Evaluator  # noqa: E402
from fitness.engine.verdict import Verdict  # noqa: E402
from suites.registry import SuiteError, load_suite  # noqa: E402
from suites.task import Task  # noqa: E402

TARGET_PER_MIN_PER_GPU = 60.0  # issue 40


@contextlib.contextmanager
def until(ev: Evaluator, deadline: float) -> Iterator[None]:
    """evaluate_many, for the passes run_pass makes, drops what has not reached a worker by
    `deadline` (the evaluator's cancel path) and returns the finished verdicts only."""
    def many(items: list[tuple[Task, str]]) -> list[Verdict]:
        from concurrent.futures import ThreadPoolExecutor

        def one(item: tuple[Task, str]) -> Verdict | None:
            return ev.evaluate(*item, cancel=lambda: time.monotonic() > deadline)
        with ThreadPoolExecutor(max(1, 2 * ev.config.workers)) as ex:
            return [v for v in ex.map(one, items) if v is not None]
    ev.evaluate_many = many  # type: ignore[method-assign,assignment]  # an instance attribute, removed below
    try:
        yield
    finally:
        del ev.evaluate_many


def items_for(ev: Evaluator, tasks: dict[str, Task], corpus: list[Candidate], first: int) -> list[tuple[Task, str]]:
    """Every candidate as a variant numbered from `first` (a fresh compile), as the evaluator
    will run it: unchanged on a GPU, with the stand-in autotune benchmark under the interpreter."""
    out = []
    for k, c in enumerate(corpus):
        source = variant(c.source, first + k)
        out.append((tasks[c.task], source if ev.gpu else for_interpreter(source)))
    return out


def worker_phase_ms(verdicts: list[Verdict]) -> dict[str, float]:
    """Correctness-worker ms summed over verdicts: handle (all), autotune (the hook's count), and
    the compile estimate: each verdict's first call, less its autotuning and the mean of its later
    calls (a later call of a new shape may compile too: the estimate errs low)."""
    total = {"handle": 0.0, "autotune": 0.0, "compile_est": 0.0}
    for v in verdicts:
        w = v.phases.get("worker_ms") or {}
        total["handle"] += w.get("handle", 0.0)
        total["autotune"] += w.get("autotune", 0.0)
        later = max(1, len(v.cases) - 1)
        first = w.get("first_case", 0.0) - w.get("autotune", 0.0)
        total["compile_est"] += max(0.0, first - w.get("other_cases", 0.0) / later)
    return total


def shares(ev: Evaluator, p: dict, label: str) -> dict[str, float]:
    wall = max(p["wall"], 1e-9)
    w = worker_phase_ms(p["verdicts"])
    out = {"measuring_turn": p["busy"]["measuring"] / wall,
           "correctness_workers": p["busy"]["correctness"] / (wall * ev.pool.size),
           "compile_of_worker": w["compile_est"] / max(w["handle"], 1e-9),
           "autotune_of_worker": w["autotune"] / max(w["handle"], 1e-9)}
    print(f"[{label}] measuring turn busy {100 * out['measuring_turn']:.0f}% of the wall; correctness workers "
          f"busy {100 * out['correctness_workers']:.0f}% of {ev.pool.size} slots; of the workers' time, compiling "
          f"~{100 * out['compile_of_worker']:.0f}% (estimate) and autotuning {100 * out['autotune_of_worker']:.0f}%",
          flush=True)
    return out


def failures(verdicts: list[Verdict]) -> None:
    """The corpus is meant to pass: a failing candidate is named, with its reason's first line."""
    for v in verdicts:
        if not v.passed:
            lines = [ln.strip() for ln in (v.reason or "").splitlines() if ln.strip()]
            # a traceback's last line is the error; its first says where it came from
            said = lines[0] if len(lines) < 2 else f"{lines[0][:80]} ... {lines[-1]}"
            print(f"  FAILED {v.task}: {v.stage}: {said[:240]}")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default=None, help="comma-separated task names (default: every task in the corpus)")
    ap.add_argument("--limit", type=int, default=None, help="at most this many candidates (a smoke run)")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--trials", type=int, default=21)
    ap.add_argument("--rounds", type=int, default=2, help="steady state: variants of every candidate")
    ap.add_argument("--time-limit", type=float, default=240.0,
                    help="seconds for both passes; what has not reached a worker by then is dropped")
    ap.add_argument("--json", default=None, help="write the rates, shares and every verdict here")
    args = ap.parse_args()
    if args.time_limit <= 0 or args.workers < 1 or args.rounds < 0:
        ap.error("--time-limit must be > 0, --workers >= 1, --rounds >= 0")
    return args


def load(args: argparse.Namespace) -> tuple[dict[str, Task], list[Candidate]]:
    try:
        corpus = load_corpus(args.tasks.split(",") if args.tasks else None)[:args.limit]
        suite = load_suite("tritonbench")
    except (ValueError, SuiteError) as e:
        sys.exit(f"error: {e}")
    unknown = sorted({c.task for c in corpus} - set(suite))
    if unknown:
        sys.exit(f"error: the corpus names task(s) not in the tritonbench suite: {', '.join(unknown)}")
    return {c.task: suite[c.task] for c in corpus}, corpus


def main() -> None:
    args = parse_args()
    tasks, corpus = load(args)
    print(f"corpus: {len(corpus)} candidates for {len(tasks)} TritonBench tasks; time limit {args.time_limit:.0f} s",
          flush=True)
    out: dict = {}
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.monotonic()
        with Evaluator(EvalConfig(workers=args.workers, trials=args.trials, triton_cache=cache)) as ev:
            deadline = t0 + args.time_limit
            with until(ev, deadline):
                cold = run_pass(ev, items_for(ev, tasks, corpus, 0), "cold")
                failures(cold["verdicts"])
                items = [it for r in range(args.rounds) for it in items_for(ev, tasks, corpus, (1 + r) * len(corpus))]
                steady = run_pass(ev, items, "steady state") if items and time.monotonic() < deadline else cold
            dropped = len(corpus) * (1 + args.rounds) - len(cold["verdicts"]) \
                - (len(steady["verdicts"]) if steady is not cold else 0)
            if dropped:
                print(f"time limit: {dropped} evaluations dropped before reaching a worker", flush=True)
            if steady is cold:
                print("steady state: not run (no --rounds, or the time limit passed): its figures are the cold pass's")
            phase_table({"cold": cold, "steady state": steady})
            share = {"cold": shares(ev, cold, "cold"), "steady": shares(ev, steady, "steady state")}
            print(bound(ev, steady))
            gpus = max(1, ev.gpus)
            per_gpu = steady["per_min"] / gpus
            verdict = "meets" if per_gpu >= TARGET_PER_MIN_PER_GPU else "below"
            print(f"throughput: {cold['per_min']:.1f}/min cold, {steady['per_min']:.1f}/min steady state "
                  f"({per_gpu:.1f}/min per GPU over {gpus}; {verdict} issue 40's {TARGET_PER_MIN_PER_GPU:.0f}/min"
                  f"{'' if ev.gpu else '; no GPU here: correctness only, not comparable'})")
            out.update(cold_per_min=cold["per_min"], steady_per_min=steady["per_min"], per_gpu=per_gpu,
                       shares=share, bound=bound(ev, steady), gpu=ev.gpu,
                       phases={"cold": cold["phases"], "steady": steady["phases"]})
    if args.json:
        out["verdicts"] = {k: [v.to_dict() for v in p["verdicts"]] for k, p in (("cold", cold), ("steady", steady))}
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
