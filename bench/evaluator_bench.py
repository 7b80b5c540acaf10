"""Evaluator benchmark (GPU): throughput end to end, where the time goes, and A/A timing noise.

    python bench/evaluator_bench.py [--suite builtin|tritonbench] [--tasks a,b | --sample N]
                                    [--workers 8] [--rounds 2] [--json OUT]

1. Throughput: every task's starting kernel evaluated as a candidate (correctness on the tuning
   and held-out cases, the replay, then timing against the suite's baseline). Twice: cold (fresh
   children, caches, references, compiles on the way), then steady state: --rounds variants of
   every kernel that must compile afresh, in the same evaluator, as in a long search.
2. Where the time went: the summed seconds of every phase the verdicts recorded, cold and
   steady, and per candidate; then which resource bounds the steady rate (the GPU's measuring
   turn, the correctness slots, or the clean children that replay and time).
3. A/A: each starting kernel timed against itself (the evaluator's A/A sentinel); the noise is
   the median (and max) over tasks of |A/A - 1|.
On a machine without a GPU it runs too (correctness only, nothing timed): a smoke test.
Not a test: numbers depend on the machine. Quote its output.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fitness.engine.evaluator as evaluator_module  # noqa: E402
from archives.metrics import aa_noise  # noqa: E402
from fitness.engine.evaluator import EvalConfig, Evaluator  # noqa: E402
from fitness.engine.verdict import Verdict, geomean  # noqa: E402
from suites.registry import SuiteError, load_suite, select  # noqa: E402


def variant(source: str, n: int) -> str:
    """The same kernels with a comment on the first @triton.jit function's def line: Triton
    hashes the function's source, so the variant compiles afresh, as a new candidate would."""
    lines = source.splitlines()
    jit = next((k for k, line in enumerate(lines) if line.lstrip().startswith("@triton.jit")), None)
    if jit is None:
        return source + f"\n# variant {n}\n"
    d = next(k for k in range(jit, len(lines)) if lines[k].lstrip().startswith("def "))
    lines[d] += f"  # variant {n}"
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


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU since boot (Linux), or zeros."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def run_pass(ev: Evaluator, items: list, label: str) -> dict:
    t0, cpu0, engine0 = time.monotonic(), _cpu_ticks(), time.process_time()
    busy0 = {"measuring": ev.measuring_s, "correctness": ev.pool.busy_s,
             "clean": ev.timer.busy_s if ev.timer else 0.0}
    refs0 = (ev.references.computed, ev.references.compute_s, ev.references.wait_s)
    served0 = dataclasses.replace(ev.ref_service.stats, child_ms=dict(ev.ref_service.stats.child_ms)) \
        if ev.ref_service else None
    verdicts = ev.evaluate_many(items)
    wall = time.monotonic() - t0
    phases: dict[str, float] = {}
    for v in verdicts:
        _sum_phases(phases, v.phases, "")
        for row in v.times:
            _sum_phases(phases, {k: x / 1e3 for k, x in row.phase_ms.items()}, "timing.")
    busy = {"measuring": ev.measuring_s - busy0["measuring"],
            "correctness": ev.pool.busy_s - busy0["correctness"],
            "clean": (ev.timer.busy_s if ev.timer else 0.0) - busy0["clean"]}
    per_min = 60 * len(verdicts) / wall
    passed, timed = sum(v.passed for v in verdicts), sum(v.speedup is not None for v in verdicts)
    print(f"[{label}] {len(verdicts)} candidates in {wall:.1f} s = {per_min:.1f} candidates/min "
          f"({passed} passed, {timed} timed)", flush=True)
    cpu1 = _cpu_ticks()
    if cpu1[1] > cpu0[1]:
        print(f"[{label}] the machine's CPUs busy {100 * (cpu1[0] - cpu0[0]) / (cpu1[1] - cpu0[1]):.0f}% "
              f"({os.cpu_count()} CPUs); the engine process {time.process_time() - engine0:.1f} CPU s "
              f"({(time.process_time() - engine0) / max(1, len(verdicts)):.3f} per candidate)", flush=True)
    for name, pool in (("correctness", ev.pool), ("clean", ev.timer)):
        if pool is not None and pool.spares:
            n = max(1, pool.served["spare"])
            print(f"[{label}] {name} children so far: {pool.served['spare']} warm from {pool.spares} spares, "
                  f"{pool.served['cold']} forked cold; a spare's device start {pool.spare_start_s / n:.2f} s "
                  f"on average", flush=True)
    memory = getattr(ev, "memory", None)  # admission by GPU memory (absent before issue 48)
    if memory is not None:
        needs = ", ".join(f"{r} {memory.need(r) / 2**30:.1f}" for r in ("candidate", "clean", "baseline"))
        print(f"[{label}] GPU memory admission: most reserved at once {memory.most_held / 2**30:.1f} GiB of a "
              f"{memory.budget / 2**30:.1f} GiB budget; children waited {memory.waited_s:.1f} s in all; stages "
              f"run again alone after running out of memory: {memory.alone_runs}; needs now (GiB): {needs}",
              flush=True)
    refs = ev.references
    print(f"[{label}] references: {refs.computed - refs0[0]} computed, {refs.compute_s - refs0[1]:.1f} s computing, "
          f"{refs.wait_s - refs0[2]:.1f} s waiting for one of {refs.parallel} turns", flush=True)
    if ev.ref_service is not None and served0 is not None:
        now = ev.ref_service.stats
        n = now.checks - served0.checks
        each_ms = (now.check_s - served0.check_s) / max(1, n) * 1e3
        print(f"[{label}] reference children: {n} comparisons answered, {each_ms:.1f} ms each in the engine's "
              f"wall; {now.fallbacks - served0.fallbacks} made by the engine", flush=True)
        steps = ", ".join(f"{k} {(ms - served0.child_ms.get(k, 0.0)) / max(1, n):.1f}"
                          for k, ms in sorted(now.child_ms.items()))
        sent = (now.sent_bytes - served0.sent_bytes) / max(1, n) / 2**20
        print(f"[{label}] inside the reference children, ms per comparison: {steps}; {sent:.1f} MiB of outputs "
              f"sent per comparison", flush=True)
    exclusive = [v.phases["timing_exclusive_s"] for v in verdicts if "timing_exclusive_s" in v.phases]
    rows = [r for v in verdicts for r in v.times]
    if exclusive:
        kept = sum(r.baseline_kept for r in rows)
        print(f"[{label}] measuring turn per timed candidate: median {statistics.median(exclusive):.3f} s, "
              f"max {max(exclusive):.3f} s; the baseline's kept trials used on {kept} of {len(rows)} shapes; "
              f"baseline sides prepared inside the turn so far: {ev.turn.baseline_prepares} "
              f"(before it: {ev.turn.baseline_prepares_outside})", flush=True)
    return {"verdicts": verdicts, "wall": wall, "per_min": per_min, "phases": phases, "busy": busy}


def phase_table(passes: dict[str, dict]) -> None:
    names = sorted({k for p in passes.values() for k in p["phases"]})
    print(f"\n{'phase (summed s; per candidate)':34}" + "".join(f"{label:>24}" for label in passes))
    for k in names:
        cells = []
        for p in passes.values():
            x, n = p["phases"].get(k, 0.0), max(1, len(p["verdicts"]))
            cells.append(f"{x:10.1f} ; {x / n:8.3f}")
        print(f"{k:34}" + "".join(f"{c:>24}" for c in cells))


def bound(ev: Evaluator, steady: dict) -> str:
    """Which resource held the steady pass back: the largest share of its capacity used."""
    wall = max(steady["wall"], 1e-9)
    shares = {"the GPU's measuring turn": steady["busy"]["measuring"] / wall,
              f"the {ev.pool.size} correctness slots": steady["busy"]["correctness"] / (wall * ev.pool.size)}
    if ev.timer:
        shares[f"the {ev.timer.size} clean (replay and timing) children"] = \
            steady["busy"]["clean"] / (wall * ev.timer.size)
    name, share = max(shares.items(), key=lambda kv: kv[1])
    used = ", ".join(f"{k} {100 * v:.0f}%" for k, v in shares.items())
    return f"bound: {name} (busy {100 * share:.0f}% of its capacity; {used})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="builtin")
    ap.add_argument("--tasks", default=None, help="comma-separated task names (default: all, or --sample)")
    ap.add_argument("--sample", type=int, default=None, help="the first N tasks that have a starting kernel")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--trials", type=int, default=21)
    ap.add_argument("--rounds", type=int, default=2, help="steady state: variants of every task, evaluated together")
    ap.add_argument("--json", default=None, help="write every verdict here")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="the engine's sys.setswitchinterval (s), to see what the GIL costs the trials")
    ap.add_argument("--no-aa", action="store_true", help="skip the A/A pass")
    ap.add_argument("--spares", type=int, default=None, help="warm spare children per pool, at least")
    ap.add_argument("--ref-children", type=int, default=None,
                    help="reference children (fitness.engine.reference_service) on a GPU machine")
    ap.add_argument("--clean", type=int, default=None, help="clean (replay and timing) children, at least")
    args = ap.parse_args()
    if args.spares is not None:
        evaluator_module.SPARE_CHILDREN = args.spares
    if args.ref_children is not None:
        evaluator_module.REFERENCE_CHILDREN = args.ref_children
    if args.clean is not None:
        evaluator_module.TIMING_CHILDREN = args.clean
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    try:  # an unknown suite or task: the registry's one-line error, as run.py gives it
        suite = load_suite(args.suite)
        tasks = list(select(suite, args.tasks).values()) if args.tasks else \
            [t for t in suite.values() if t.start_source][:args.sample]
    except SuiteError as e:
        sys.exit(f"error: {e}")
    out: dict = {}
    with tempfile.TemporaryDirectory() as cache:
        with Evaluator(EvalConfig(workers=args.workers, trials=args.trials, triton_cache=cache)) as ev:
            cold = run_pass(ev, [(t, variant(t.start_source, 0)) for t in tasks], "cold")
            items = [(t, variant(t.start_source, 1 + r * len(tasks) + i))
                     for r in range(args.rounds) for i, t in enumerate(tasks)]
            steady = run_pass(ev, items, "steady state")
            phase_table({"cold": cold, "steady state": steady})
            print(bound(ev, steady))
            t0 = time.monotonic()
            aa = [] if args.no_aa else [ev.evaluate(t, t.start_source, aa=True) for t in tasks]
            aa_wall = time.monotonic() - t0
    print(f"\n{'task':28} {'stage':7} {'vs baseline':>11} {'A/A':>7}  method or reason")
    noise = []
    for v, a in zip(steady["verdicts"], aa or [Verdict(task=t.name, stage="-") for t in tasks]):
        sp = f"{v.speedup:.3f}" if v.speedup else "-"
        aa_s = f"{a.speedup:.3f}" if a.speedup else "-"
        if a.speedup:
            noise.append(abs(a.speedup - 1))
        methods = "/".join(sorted({r.method for r in v.times}))
        print(f"{v.task:28} {v.stage:7} {sp:>11} {aa_s:>7}  {methods or v.reason.splitlines()[0][:70]}")
    timed = [v.speedup for v in steady["verdicts"][:len(tasks)] if v.speedup]
    if timed:
        print(f"\ngeomean speedup of the starting kernels vs the baseline: {geomean(timed):.3f} "
              f"over {len(timed)} tasks")
    if noise:
        median, p90 = aa_noise([1 + x for x in noise])
        print(f"A/A noise (alone, {aa_wall:.0f} s): median |A/A - 1| = {100 * median:.2f}%, "
              f"p90 {100 * p90:.2f}% (max {100 * max(noise):.2f}%) over {len(noise)} tasks")
    print(f"throughput: {cold['per_min']:.1f}/min cold, {steady['per_min']:.1f}/min steady state")
    out.update(cold_per_min=cold["per_min"], steady_per_min=steady["per_min"],
               aa_median_abs_dev=statistics.median(noise) if noise else None,
               phases={"cold": cold["phases"], "steady": steady["phases"]})
    if args.json:
        out["verdicts"] = {"steady": [v.to_dict() for v in steady["verdicts"]], "aa": [a.to_dict() for a in aa],
                           "cold": [v.to_dict() for v in cold["verdicts"]]}
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
