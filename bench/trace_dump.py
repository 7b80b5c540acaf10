"""What the recorder saw of one candidate call, and what its replay gives on fresh inputs (GPU
or CPU): a diagnostic for an exploit whose verdict surprises.

    python bench/trace_dump.py tests/exploits/NAME.py [--task softmax]
"""
import argparse
import importlib.util
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fitness.candidate.harness import LaunchHook, to_device  # noqa: E402
from fitness.candidate.recorder import Recorder  # noqa: E402
from fitness.clean.kernel_source import kernels_from_source  # noqa: E402
from fitness.clean.replayer import Replayer, ReplayError  # noqa: E402
from fitness.common.inputs import draw_inputs  # noqa: E402
from fitness.common.reference import compare_case, compute  # noqa: E402
from suites.registry import load_suite  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--task", default="softmax")
    ap.add_argument("--small", action="store_true", help="the task's interpreter shapes (fast on CPU)")
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    task = load_suite("builtin")[a.task]
    hook = LaunchHook()
    hook.install()
    spec = importlib.util.spec_from_file_location("cand", a.path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    case = {"split": "tuning", "shape": dict(task.shape_set(a.small).tuning[0]), "dtype": task.dtypes[0], "seed": 11}
    for seed in (11, 12):  # the second call is the one traced, as in the evaluator
        args = tuple(to_device(x, dev) for x in draw_inputs(task, {**case, "seed": seed}, seed, dev))
        rec = Recorder(args)
        hook.recorder = rec
        with rec:
            out = getattr(mod, task.entry)(*args)
        hook.recorder = None
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    trace = rec.trace(outs)
    for ev in trace["events"]:
        print(ev["kind"], ev.get("name") or ev.get("kernel"), ev.get("grid", ""))
    print("buffers:", [(b["from"], b["nbytes"]) for b in trace["buffers"]])
    print("outputs:", trace["outputs"], "problem:", trace["problem"])
    fresh = {**case, "seed": 99}
    try:
        kernels = kernels_from_source(Path(a.path).read_text(), "cand") if dev == "cpu" else None
        rep = Replayer(trace, dev, kernels)
        got = rep.run(tuple(to_device(x, dev) for x in draw_inputs(task, fresh, 99, dev)))
    except ReplayError as e:
        print("replay refused:", e)
        return
    refs, expected = compute(task, fresh, dev)
    print("replay torch work:", rep.torch_elements, rep.torch_ops)
    print("replay vs reference:", compare_case(task, got, refs, expected) or "ok")


if __name__ == "__main__":
    main()
