"""What a float64 reference costs the engine on this machine (GPU if there is one): per builtin
task, the milliseconds of each step of fitness.common.reference.compute over its tuning and held-out
shapes, with the device synchronised after each step; then the same with N threads at once.

    python bench/reference_cost.py [--suite builtin] [--repeat 3] [--threads 1,4] [--load 8]
                                   [--sync-debug]

--load N: then again with N other processes keeping the GPU busy (short kernels, as the
evaluator's children do); --sync-debug: torch warns at every call that waits for the device.

Not a test: numbers depend on the machine. Quote its output.
"""
from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from fitness.common.inputs import draw_inputs  # noqa: E402
from fitness.common.reference import ReferenceCache, _float64_reference, on_meta  # noqa: E402
from suites.registry import load_suite  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def cases(task, rng: random.Random) -> list[dict]:
    shapes = list(task.shapes.tuning) + list(task.draw_heldout(rng, False))
    return [{"split": "tuning", "shape": dict(s), "dtype": dt, "seed": rng.randrange(1 << 30)}
            for s in shapes for dt in task.dtypes]


def steps(task, case: dict) -> dict[str, float]:
    out, t = {}, time.perf_counter()
    args = draw_inputs(task, case, case["seed"], DEVICE)
    sync()
    out["draw"], t = time.perf_counter() - t, time.perf_counter()
    on_meta(task, args)
    out["meta"], t = time.perf_counter() - t, time.perf_counter()
    _float64_reference(task, args, DEVICE)
    out["float64 ref (launch)"] = time.perf_counter() - t
    sync()
    out["float64 ref (done)"] = time.perf_counter() - t
    return out


def threaded(tasks: list, n: int, rng: random.Random) -> tuple[int, float]:
    cache = ReferenceCache(device=DEVICE, parallel=n)
    work = [(t, c) for t in tasks for c in cases(t, rng)]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=lambda part: [cache.get(t, c) for t, c in part], args=(work[k::n],))
               for k in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    sync()
    return len(work), time.perf_counter() - t0


def _busy(stop) -> None:
    x = torch.randn(2048, 2048, device="cuda")
    while not stop.is_set():
        for _ in range(20):
            x = torch.tanh(x @ x)
        torch.cuda.synchronize()


def loaded(tasks: list, threads: list[int], procs: int, rng: random.Random) -> None:
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    workers = [ctx.Process(target=_busy, args=(stop,)) for _ in range(procs)]
    for w in workers:
        w.start()
    time.sleep(8)  # their CUDA contexts started
    try:
        for t in threads:
            refs, wall = threaded(tasks, t, rng)
            print(f"beside {procs} processes busy on the GPU: ReferenceCache.get from {t} threads: {refs} references "
                  f"in {wall:.2f} s = {1e3 * wall / refs:.2f} ms each", flush=True)
    finally:
        stop.set()
        for w in workers:
            w.join(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="builtin")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="1,4")
    ap.add_argument("--load", type=int, default=0)
    ap.add_argument("--sync-debug", action="store_true")
    args = ap.parse_args()
    if args.sync_debug and DEVICE == "cuda":
        torch.cuda.set_sync_debug_mode("warn")
    tasks = [t for t in load_suite(args.suite).values() if t.script is None]
    rng = random.Random(0)
    total: dict[str, float] = {}
    n = 0
    print(f"device {DEVICE}; ms per reference, the mean over each task's cases (after one warm-up pass)")
    for task in tasks:
        for c in cases(task, rng):
            steps(task, c)  # warm-up: kernels loaded, allocator grown
        per: dict[str, float] = {}
        k = 0
        for _ in range(args.repeat):
            for c in cases(task, rng):
                for name, s in steps(task, c).items():
                    per[name] = per.get(name, 0.0) + s
                k += 1
        for name, s in per.items():
            total[name] = total.get(name, 0.0) + s
        n += k
        print(f"{task.name:24}" + "".join(f" {name} {1e3 * s / k:7.2f}" for name, s in per.items()), flush=True)
    print(f"{'all':24}" + "".join(f" {name} {1e3 * s / n:7.2f}" for name, s in total.items()))
    threads = [int(x) for x in args.threads.split(",")]
    for t in threads:
        refs, wall = threaded(tasks, t, rng)
        print(f"ReferenceCache.get from {t} threads ({t} at once): {refs} references in {wall:.2f} s = "
              f"{1e3 * wall / refs:.2f} ms each", flush=True)
    if args.load and DEVICE == "cuda":
        loaded(tasks, threads, args.load, rng)


if __name__ == "__main__":
    main()
