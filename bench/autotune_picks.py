"""Which config each process's autotuner picks for a script task's reference: the same code, in
several fresh processes, first one at a time, then all at once (the load of a search or a
validate), each calling the suite's call once on every timed benchmark input. Where the picks
differ between processes, two processes of the same code time different kernels: an A/A far
from 1.0x with no other cause.

    python bench/autotune_picks.py --suite tritonbench --tasks fused_layernorm_triton [--processes 4]

Not a test: the picks depend on the machine and its load. Quote its output.
"""
from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def picks(suite: str, name: str, seed: int) -> dict[str, str]:
    """In a fresh process: {autotuned function: 'key -> config; ...'} after one call per timed input."""
    import torch
    from triton.runtime.autotuner import Autotuner

    from fitness.engine.script_eval import MAX_TIMED, spread, timing_inputs
    from suites.registry import load_suite
    from suites.task import to_device

    task = load_suite(suite)[name]
    runner = task.script
    module = runner._input_module()
    call = runner.bind(module, runner.reference_entry)
    usable = timing_inputs(runner.perf_bytes())
    for i in (usable[j] for j in spread(len(usable), MAX_TIMED)):
        call(*to_device(runner.perf_args(i, seed), "cuda"))
    torch.cuda.synchronize()
    out = {}
    for value in vars(module).values():
        if isinstance(value, Autotuner) and value.cache:
            fn = getattr(value, "base_fn", value.fn)
            out[getattr(fn, "__name__", repr(fn))] = "; ".join(
                f"{key} -> {cfg}" for key, cfg in sorted(value.cache.items(), key=str))
    return out


def show(label: str, results: list[dict[str, str]]) -> None:
    names = sorted({n for r in results for n in r})
    for n in names:
        seen = [r.get(n, "") for r in results]
        print(f"  {label}: {n}: {len(set(seen))} different pick(s) over {len(seen)} processes", flush=True)
        for k, s in enumerate(seen):
            print(f"    process {k}: {s[:600]}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="tritonbench")
    ap.add_argument("--tasks", required=True, help="comma-separated task names")
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ctx = multiprocessing.get_context("spawn")
    for name in args.tasks.split(","):
        print(f"{name}:", flush=True)
        with ctx.Pool(1, maxtasksperchild=1) as one:  # one at a time, each in a fresh process
            t = time.monotonic()
            alone = [one.apply(picks, (args.suite, name, args.seed)) for _ in range(args.processes)]
        show(f"alone ({time.monotonic() - t:.0f} s)", alone)
        with ctx.Pool(args.processes) as many:
            t = time.monotonic()
            together = many.starmap(picks, [(args.suite, name, args.seed)] * args.processes)
        show(f"at once ({time.monotonic() - t:.0f} s)", together)
    return 0


if __name__ == "__main__":
    sys.exit(main())
