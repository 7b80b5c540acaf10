"""Is a TritonBench task's own test reproducible, outside triton-evolve? (GPU)

    python bench/repro_check.py --tasks a,b [--runs 2] [--jobs 4] [--suite-path DIR]

Runs each task's kernel file as a plain script, the way its authors ran it, with
`torch.manual_seed(0)` first, in --runs fresh processes; then compares the `result_gold` trees
of the runs with the tolerances `validate` uses. A task whose runs disagree here has a test
that cannot judge a candidate (write races on repeated indices, atomics, reads of memory no one
wrote), whatever harness runs it: that is what `validate`'s "reference not reproducible" means.
Not a test: quote its output.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from fitness.common.compare import compare_tree  # noqa: E402
from suites.data import suite_dir  # noqa: E402
from suites.registry import load_suite  # noqa: E402

RUN = """
import runpy, sys, torch
sys.path.insert(0, {root!r})
from suites.script import to_wire
torch.manual_seed(0)
g = runpy.run_path({path!r}, run_name="tb_plain_script")
torch.save(to_wire(g["result_gold"]), {out!r})
"""


def run_once(path: Path, out: Path, timeout: float) -> str:
    code = RUN.format(root=str(Path(__file__).resolve().parent.parent), path=str(path), out=str(out))
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                           cwd=path.parent)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    if p.returncode:
        return "failed: " + (p.stderr.strip().splitlines() or ["?"])[-1][:200]
    return ""


def check(task, path: Path, runs: int, timeout: float, tmp: Path) -> str:
    outs = [tmp / f"{task.name}.{i}.pt" for i in range(runs)]
    for out in outs:
        problem = run_once(path, out, timeout)
        if problem:
            return problem
    first = torch.load(outs[0], weights_only=False)
    for out in outs[1:]:
        problem = compare_tree(torch.load(out, weights_only=False), first, task.tolerance)
        if problem:
            return "differs between runs: " + problem[:240]
    return "reproducible"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--suite-path", default=None)
    args = ap.parse_args()
    root = suite_dir("tritonbench", args.suite_path)
    tasks = load_suite("tritonbench", args.suite_path)
    names = [n for n in args.tasks.split(",") if n]
    unknown = [n for n in names if n not in tasks]
    if unknown:
        sys.exit(f"unknown task(s): {', '.join(unknown)}")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as ex:
        results = ex.map(lambda n: check(tasks[n], root / "kernels" / f"{n}.py", args.runs, args.timeout,
                                         Path(tmp)), names)
        for name, verdict in zip(names, results):
            print(f"{name:32} {verdict}", flush=True)


if __name__ == "__main__":
    main()
