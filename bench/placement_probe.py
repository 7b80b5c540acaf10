"""Does where a small call's sets lie in GPU memory move its timed median? (GPU)

    python bench/placement_probe.py --tasks a,b [--layouts 6] [--max-bytes 1048576]

For each TritonBench perf shape of the tasks whose inputs are under --max-bytes, the suite's own
code is timed in this one process as fitness.clean.timing times a side (CUDA graph over its input sets,
L2 flushed, 21 timed regions after an untimed one), --layouts times, each time after a pad of
random size that moves where the new side's memory begins. Three ways (WAYS): every set placed
after the one before ("packed"), with and without the GPU held busy before each region's start
event ("lead", fitness.clean.timing.LEAD_CYCLES), and with fitness.clean.timing's random pads before every set
("spread"). Prints, per shape and way, the median over the layouts and the medians' range: what
one process's placement alone can make of an A/A. Not a test: quote its output.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import fitness.clean.timing as timing  # noqa: E402
from fitness.candidate.harness import nbytes  # noqa: E402
from fitness.common.inputs import draw_inputs  # noqa: E402
from fitness.engine.script_eval import perf_case  # noqa: E402
from suites.registry import load_suite  # noqa: E402
from suites.task import Task  # noqa: E402

# (name, fitness.clean.timing.SPREAD_BELOW_BYTES, fitness.clean.timing.LEAD_CYCLES)
WAYS = (("packed", 0, 0), ("packed+lead", 0, timing.LEAD_CYCLES),
        ("spread+lead", timing.SPREAD_BELOW_BYTES, timing.LEAD_CYCLES))


def reference_fn(task: Task, folder: str):
    """The suite's own call, loaded as the baseline child loads it."""
    assert task.script is not None, f"{task.name} is not a script task"
    path = Path(folder) / f"reference_{task.name}.py"
    path.write_text(task.script.reference_source)
    spec = importlib.util.spec_from_file_location(f"reference_{task.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return task.script.bind(module, task.script.reference_entry)


def one_layout(fn, draws: list[tuple], trials: int) -> float:
    """A fresh side after a random shift, timed: the median ms per call."""
    shift = [torch.empty(base + 512 * int(torch.randint(0, 2048, ())), dtype=torch.uint8, device="cuda")
             for base in (0, 1 << 20)]  # both of the allocator's pools
    side = timing.TimedSide(fn, draws)
    cal = side.calibrate()
    n = timing.n_sets_for(cal["in_bytes"], cal["t_one_ms"], cal["l2_bytes"])
    side.prepare(n, graph=True)
    side.trial(1)
    ms = statistics.median(side.trial(k) for k in range(trials))
    del side, shift
    return ms


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--layouts", type=int, default=6)
    ap.add_argument("--trials", type=int, default=21)
    ap.add_argument("--max-bytes", type=int, default=timing.SPREAD_BELOW_BYTES)
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop starting new shapes after this")
    args = ap.parse_args()
    suite = load_suite("tritonbench")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        for name in args.tasks.split(","):
            task = suite[name]
            fn = reference_fn(task, folder)
            assert task.script is not None
            for index, size in enumerate(task.script.perf_bytes()):
                if size >= args.max_bytes:
                    continue
                if time.monotonic() - t0 > args.budget_s:
                    print("budget spent", flush=True)
                    return
                case = perf_case("timing", index, 0)
                draws = [tuple(draw_inputs(task, case, s, "cuda")) for s in (0, 1, 2)]
                line = []
                for way, below, lead in WAYS:
                    timing.SPREAD_BELOW_BYTES, timing.LEAD_CYCLES = below, lead
                    meds = [one_layout(fn, draws, args.trials) for _ in range(args.layouts)]
                    mid = statistics.median(meds)
                    line.append(f"{way} {1e3 * mid:.2f} us, {1e3 * min(meds):.2f}-{1e3 * max(meds):.2f} "
                                f"(range {100 * (max(meds) - min(meds)) / mid:.1f}%)")
                print(f"{name} perf {index} ({nbytes(draws[0])} B): " + "; ".join(line), flush=True)
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
