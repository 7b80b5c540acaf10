"""A/A across devices (issue 42): the same kernel timed in every unit of a Dask cluster, one GPU each.

    python bench/aa_devices.py --cluster gpus --tasks softmax,layernorm,... [--rounds 2] [--workers 8]

Each unit evaluates each task's starting kernel against itself (the A/A sentinel's evaluation,
`aa=True`, pinned to that unit: fitness.engine.cluster.evaluate_here, as a search's evaluations run),
every unit at once, one task at a time. Per unit it prints the A/A noise inside the unit
(|A/A - 1|: both sides timed in one measuring turn on one GPU); per task and shape the kernel's
own time in each unit and the spread between the units' times (max/min - 1). A spread above the
in-unit noise is what a ratio across GPUs would carry; the engine forms none (each verdict's
speedup is its candidate over a baseline timed in the same unit). Not a test: quote its output.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fitness.engine.cluster import RESOURCE, ClusterConfig, ClusterEvaluator, evaluate_here, share  # noqa: E402
from fitness.engine.evaluator import EvalConfig  # noqa: E402
from fitness.engine.verdict import Verdict  # noqa: E402
from suites.registry import SuiteError, load_suite, select  # noqa: E402


def rounds(ev: ClusterEvaluator, suite: str, tasks: dict, n: int) -> dict[tuple[str, str], list[Verdict]]:
    """(task, unit name) -> its verdicts; every unit at once, one task after another."""
    addresses = sorted(a for a, w in ev.client.scheduler_info(n_workers=-1)["workers"].items()
                       if w.get("resources", {}).get(RESOURCE, 0) >= 1)
    out: dict[tuple[str, str], list[Verdict]] = defaultdict(list)
    for _ in range(n):
        for name, task in tasks.items():
            futures = [ev.client.submit(pinned_remote, ev.config, suite, name, task.start_source, a,
                                        workers=[a], allow_other_workers=False,
                                        resources={RESOURCE: share(ev.slots)}, pure=False) for a in addresses]
            for v in ev.client.gather(futures):
                out[(name, v.unit)].append(v)
    return out


def pinned_remote(config: EvalConfig, suite: str, name: str, source: str, address: str) -> Verdict:
    """Runs in the unit at `address` (the argument keeps one submission per unit distinct)."""
    verdict, _ = evaluate_here(config, suite, name, source, True, True)
    return verdict


def report(results: dict[tuple[str, str], list[Verdict]]) -> None:
    units = sorted({u for _, u in results})
    devices = {u: next(v.device for (t, uu), vs in results.items() if uu == u for v in vs) for u in units}
    for u in units:
        aa = [abs(v.speedup - 1) for (t, uu), vs in results.items() if uu == u for v in vs if v.speedup]
        failed = [f"{t}: {v.reason[:80]}" for (t, uu), vs in results.items() if uu == u for v in vs
                  if v.speedup is None]
        print(f"unit {u} ({devices[u]}): {len(aa)} A/A timings, median |A/A - 1| "
              f"{100 * statistics.median(aa) if aa else float('nan'):.2f}%, max {100 * max(aa, default=0):.2f}%"
              + (f"; untimed: {failed}" if failed else ""), flush=True)
    spreads = []
    for task in sorted({t for t, _ in results}):
        by_shape: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for u in units:
            for v in results.get((task, u), []):
                for r in v.times:
                    by_shape[str(r.shape)][u].append(r.candidate_ms)
        for shape, per_unit in by_shape.items():
            ms = {u: statistics.median(x) for u, x in per_unit.items()}
            spread = max(ms.values()) / min(ms.values()) - 1
            spreads.append(spread)
            cells = ", ".join(f"{u.split(':', 1)[-1]} {m:.4f}" for u, m in sorted(ms.items()))
            print(f"  {task} {shape}: ms by unit {cells}; spread {100 * spread:.2f}%", flush=True)
    if spreads:
        print(f"across units: median spread {100 * statistics.median(spreads):.2f}%, "
              f"max {100 * max(spreads):.2f}% over {len(spreads)} shapes", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster", default="gpus", help="gpus (a unit per visible GPU) or tcp://HOST:PORT")
    p.add_argument("--suite", default="builtin")
    p.add_argument("--tasks", default="softmax,layernorm,rmsnorm,matmul,row_sum,bias_gelu")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workers", type=int, default=8)
    a = p.parse_args()
    try:
        tasks = select(load_suite(a.suite), a.tasks, None, None)
    except SuiteError as e:
        print(f"aa_devices: {e}", file=sys.stderr)
        return 2
    with ClusterEvaluator(EvalConfig(workers=a.workers), ClusterConfig(where=a.cluster)) as ev:
        report(rounds(ev, a.suite, tasks, a.rounds))
        if not ev.gpu:  # the path runs (a CPU check of this script), but no time was measured
            print("aa_devices: the cluster's units see no GPU: nothing was timed", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
