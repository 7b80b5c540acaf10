"""Does the engine keep a large Dask cluster busy? A real search (builtin tasks, knob operators,
the SQLite archive, fitness.engine.cluster.ClusterEvaluator) over N local Dask worker processes whose
evaluation is a stand-in: it holds its unit's exclusive section (a GPU's measuring turn, in a real
unit) for a fixed time and answers with a verdict. The busy share is that section's held time
over wall time x units: near 100% means the engine (proposing, archiving, Dask's scheduling) is
not what bounds the run at that size.

    python bench/cluster_scale.py --units 32 --hold 1.0 --seconds 60
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

def _unit() -> str:
    from distributed import get_worker

    return get_worker().address


def _state() -> dict:
    """Kept on the Dask worker itself: these functions travel pickled by value, each call with
    fresh module globals, so a global lock would not be shared."""
    from distributed import get_worker

    return get_worker().__dict__.setdefault("_stand_in", {"lock": threading.Lock(), "held": 0.0})


def stand_in_probe(config):
    from fitness.engine.verdict import UnitStats

    return UnitStats(_unit(), "stand-in", False, config.workers, 0, 0.0, 0.0)


def stand_in_evaluate(hold_s, config, suite, name, source, timed, aa):
    """One evaluation: the unit's exclusive section held `hold_s` seconds; a deterministic verdict
    (correct, a speedup drawn from the source's hash) so selection has something to rank."""
    from fitness.engine.verdict import UnitStats, Verdict

    unit, state = _unit(), _state()
    with state["lock"]:
        t0 = time.monotonic()
        time.sleep(hold_s)
        state["held"] += time.monotonic() - t0
    h = int(hashlib.sha256(source.encode()).hexdigest()[:8], 16)
    v = Verdict(task=name, stage="timed", correct=True, heldout_correct=True, speedup=0.5 + (h % 1000) / 500,
                reason="stand-in", unit=unit)
    return v, UnitStats(unit, "stand-in", False, config.workers, 0, state["held"], 0.0)


def _in_flight(dask_scheduler=None) -> tuple[int, int]:
    tasks = dask_scheduler.tasks.values()
    return len(tasks), sum(t.state == "processing" for t in tasks)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--units", type=int, default=32)
    p.add_argument("--hold", type=float, default=1.0, help="seconds each evaluation holds its unit")
    p.add_argument("--seconds", type=float, default=60.0, help="the search's --time-limit")
    p.add_argument("--workers", type=int, default=1, help="correctness workers per unit (sets the slots)")
    p.add_argument("--archive", default="/tmp/cluster_scale.db")
    a = p.parse_args()

    import dask
    from distributed import LocalCluster

    import run
    from evolve.cli_options import parse
    from evolve.runner import run_search
    from fitness.engine.cluster import RESOURCE, ClusterConfig, ClusterEvaluator
    from fitness.engine.evaluator import EvalConfig, slots_per_unit

    t0 = time.monotonic()
    dask.config.set({"logging.distributed": "error"})
    cluster = LocalCluster(n_workers=a.units, threads_per_worker=slots_per_unit(a.workers), processes=True,
                           resources={RESOURCE: 1}, host="127.0.0.1", dashboard_address=None, silence_logs=50)
    print(f"{a.units} Dask worker processes up in {time.monotonic() - t0:.0f} s", flush=True)
    holder = {}

    def make():
        holder["ev"] = ClusterEvaluator(EvalConfig(workers=a.workers, device="cpu", sandbox=False),
                                        ClusterConfig(where=cluster.scheduler_address),
                                        unit_fn=functools.partial(stand_in_evaluate, a.hold), probe_fn=stand_in_probe)
        return holder["ev"]
    Path(a.archive).unlink(missing_ok=True)
    args = parse(["search", "--suite", "builtin", "--islands", "4", "--population", "8",
                  "--generations", "1000", "--time-limit", str(a.seconds),
                  "--workers", str(a.workers), "--archive", a.archive,
                  "--export", a.archive + "-best", "--aa-every", "0"])
    cpu0 = time.process_time()
    wall0 = time.monotonic()
    samples: list[tuple[int, int]] = []
    done = threading.Event()

    def sample():  # the scheduler's view: evaluations held by the engine in Dask, and those running
        from distributed import Client

        with Client(cluster.scheduler_address) as c:
            while not done.wait(1.0):
                samples.append(c.run_on_scheduler(_in_flight))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    configs = run.search_configs(args)
    run_search(configs.run, configs.search, configs.llm, make)
    done.set()
    cluster.close()
    import sqlite3

    # the search's own wall time (the session's), not the start-up and export around it
    wall = sqlite3.connect(a.archive).execute("select wall_s from sessions order by id desc").fetchone()[0]
    cpu_wall = time.monotonic() - wall0
    units = holder["ev"].units()  # the engine's own record: still there after the client closed
    held = sum(u.correctness_busy_s for u in units)
    evals = sum(u.evaluations for u in units)
    busy = [u.correctness_busy_s / wall for u in units]
    print(f"units {len(units)}, hold {a.hold} s: {evals} evaluations in {wall:.0f} s "
          f"({60 * evals / wall:.0f}/min; the units' ceiling {60 * len(units) / a.hold:.0f}/min); "
          f"busy share {100 * held / (wall * len(units)):.1f}% (least busy unit {100 * min(busy):.1f}%); "
          f"engine process CPU {100 * (time.process_time() - cpu0) / cpu_wall:.0f}% of one core; in Dask at once: "
          f"mean {sum(t for t, _ in samples) / max(1, len(samples)):.0f} submitted, "
          f"{sum(r for _, r in samples) / max(1, len(samples)):.0f} sent to units (their slots: "
          f"{len(units) * slots_per_unit(a.workers)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
