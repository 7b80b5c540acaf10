"""Fuzz of the replay (issue 39, class 1): random mutations of genuine traces, recorded from builtin
starting kernels under the Triton interpreter, must each fail the candidate (refused by the
replayer, a crash or a hang of the replaying process, a wrong result against the engine's
reference, torch work over the allowance) or replay to outputs identical to the genuine trace's.

Each mutant runs in a forked process: a mutation that aliases buffers may make an interpreted
kernel read out of bounds, and a crashed replay child fails the candidate in the engine too."""
from __future__ import annotations

import copy
import faulthandler
import importlib.util
import os
import pickle
import random
import signal
import subprocess
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before Triton reads it: the kernels run as Python here

import pytest
import torch

from fitness.candidate.harness import LaunchHook
from fitness.candidate.recorder import Recorder
from fitness.clean.kernel_source import kernels_from_source
from fitness.clean.primitives import PRIMITIVES
from fitness.clean.replayer import Replayer
from fitness.common.compare import compare_outputs
from fitness.common.inputs import TORCH_WORK_SHARE, draw_inputs
from fitness.common.reference import compute
from fitness.process.child import module_name
from suites.registry import load_suite

ROOT = Path(__file__).resolve().parent.parent
TASKS = ("softmax", "transpose_copy", "bias_gelu")
MUTANTS_PER_TASK = int(os.environ.get("TE_FUZZ_MUTANTS", "30"))
FAILS = ("refused", "crashed", "wrong", "torch-work")


def _record(task_name: str) -> tuple:
    """A genuine trace of the task's starting kernel (its second call: compiles done), the kernels
    the engine builds from its source, and a fresh case to replay on."""
    task = load_suite("builtin")[task_name]
    source = (ROOT / "suites" / "builtin" / "start" / f"{task_name}.py").read_text()
    name = module_name(source)
    path = ROOT / ".pytest_cache" / f"{name}.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    case = {"split": "tuning", "shape": dict(task.shape_set(True).tuning[0]), "dtype": task.dtypes[0], "seed": 5}
    hook = LaunchHook()
    hook.install()
    for seed in (5, 6):
        args = draw_inputs(task, case, seed, "cpu")
        rec = Recorder(args)
        hook.recorder = rec
        with rec:
            out = getattr(mod, task.entry)(*args)
        hook.recorder = None
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return task, rec.trace(outs), kernels_from_source(source, name), {**case, "seed": 77}


def _outcome(task, trace: dict, kernels: dict, case: dict, genuine: list | None) -> str:
    """What the engine would make of this trace: one of FAILS, 'identical', or 'PASSED-DIFFERENT'
    (a mutant that passes with other outputs than the genuine trace's: the replay was fooled);
    'passes' for the genuine trace itself (genuine None)."""
    try:
        rep = Replayer(trace, "cpu", kernels)
        got = rep.run(draw_inputs(task, case, case["seed"], "cpu"))
    except Exception:  # noqa: BLE001 - any failure of the replay fails the candidate
        return "refused"
    if genuine is not None and len(got) == len(genuine) and all(
            g.shape == o.shape and g.dtype == o.dtype and torch.equal(g, o) for g, o in zip(got, genuine)):
        return "identical"
    refs, expected = compute(task, case, "cpu")
    if compare_outputs(got, refs, task.tolerance, expected=expected):
        return "wrong"
    if rep.torch_elements > max(1024, TORCH_WORK_SHARE * sum(o.numel() for o in got)):
        return "torch-work"
    return "passes" if genuine is None else "PASSED-DIFFERENT"


def _in_child(fn, *args) -> str:
    """fn(*args) in a forked process: 'crashed' if it died or ran over 60 s (a hang: the engine's
    timeout fails it too)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer and leave without running any cleanup of the parent's
        os.close(r)
        faulthandler.disable()  # a crash is an expected outcome here, not a report
        # one thread: OpenMP's pool does not survive a fork, and the parent's earlier tests used it
        # (run after tests/test_trace.py, the genuine replay hung here until the alarm)
        torch.set_num_threads(1)
        signal.alarm(60)
        try:
            os.write(w, pickle.dumps(fn(*args)))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data) if data else "crashed"


def _refs(x, found: list) -> list:
    if isinstance(x, list):
        for v in x:
            _refs(v, found)
    elif isinstance(x, dict):
        for k, v in x.items():
            if k in ("__t__", "__tw__") and isinstance(v, dict):
                found.append(v)
            else:
                _refs(v, found)
    return found


def _mutate(trace: dict, rng: random.Random) -> tuple[str, dict]:
    """One random mutation of a copy of `trace`, and its kind."""
    t = copy.deepcopy(trace)
    events, nb = t["events"], len(t["buffers"])
    ops = [e for e in events if e["kind"] == "op"]
    kinds = ["rename", "swap_args", "alias", "drop", "duplicate", "grid", "reshape", "retarget_output", "scalar"]
    kind = rng.choice(kinds if ops else [k for k in kinds if k != "rename"])
    if kind == "rename":
        ev = rng.choice(ops)
        ev["name"], ev["overload"] = rng.choice(
            [("_softmax", "default"), ("mm", "default"), ("exp", "default"), ("__getattribute__", None),
             ("clone", "default"), ("copy_", "default"), ("add", "Tensor"), ("empty", "memory_format")]
            + [tuple(k.split(".")) for k in rng.sample(sorted(PRIMITIVES), 3)])
        if rng.random() < 0.2:
            ev["ns"] = rng.choice(["prims", "os", "builtins"])
    elif kind == "swap_args":
        ev = rng.choice(events)
        if len(ev["args"]) >= 2:
            i, j = rng.sample(range(len(ev["args"])), 2)
            ev["args"][i], ev["args"][j] = ev["args"][j], ev["args"][i]
    elif kind == "alias":
        refs = _refs(events, [])
        if refs:
            rng.choice(refs)["t"] = rng.randrange(nb)
    elif kind == "drop" and events:
        events.pop(rng.randrange(len(events)))
    elif kind == "duplicate" and events:
        i = rng.randrange(len(events))
        events.insert(rng.randrange(len(events) + 1), copy.deepcopy(events[i]))
    elif kind == "grid":
        launches = [e for e in events if e["kind"] == "launch"]
        if launches:
            ev = rng.choice(launches)
            ev["grid"] = [max(0, g + rng.choice([-1, 1, 3])) for g in ev["grid"]]
    elif kind == "reshape":
        refs = _refs(events, []) + _refs(t["outputs"], [])
        if refs:
            r = rng.choice(refs)
            field = rng.choice(["size", "stride", "off", "dtype"])
            r[field] = {"size": [s * 2 for s in r["size"]], "stride": list(reversed(r["stride"])),
                        "off": r["off"] + 1, "dtype": rng.choice(["float16", "int64", "torch", "uint8"])}[field]
    elif kind == "retarget_output":
        t["outputs"][0]["__t__"]["t"] = rng.randrange(nb)
    elif kind == "scalar":
        launches = [e for e in events if e["kind"] == "launch"]
        ints = [(e, i) for e in launches for i, a in enumerate(e["args"]) if type(a) is int]
        if ints:
            ev, i = rng.choice(ints)
            ev["args"][i] = rng.choice([0, 1, ev["args"][i] * 2, -1])
    return kind, t


@pytest.mark.slow
def test_mutated_traces_fail_or_replay_identically():
    """Run in a process of its own: Triton reads TRITON_INTERPRET when triton.language is first
    imported, and in a whole test session another test module imported it first (CI: tl.max was a
    compiled-only JITFunction and the recording raised)."""
    out = subprocess.run([sys.executable, "-c", "import tests.test_trace_fuzz as t; t.fuzz()"],
                         capture_output=True, text=True, timeout=1500, cwd=ROOT,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    print(out.stdout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "trace fuzz: " in out.stdout


def fuzz() -> None:
    """Mutants of each task's genuine trace; raises on one that fools the replay."""
    rng = random.Random(39)
    tally: dict[str, int] = {}
    tried = 0
    for name in TASKS:
        task, trace, kernels, case = _record(name)
        genuine_outcome = _in_child(_outcome, task, trace, kernels, case, None)
        assert genuine_outcome == "passes", f"{name}: the genuine trace does not replay ({genuine_outcome})"
        genuine = Replayer(trace, "cpu", kernels).run(draw_inputs(task, case, case["seed"], "cpu"))
        for _ in range(MUTANTS_PER_TASK):
            kind, mutant = _mutate(trace, rng)
            result = _in_child(_outcome, task, mutant, kernels, case, genuine)
            tried += 1
            tally[result] = tally.get(result, 0) + 1
            assert result in FAILS + ("identical",), f"{name}: a {kind} mutation fooled the replay ({result})"
    print(f"trace fuzz: {tried} mutations tried on {len(TASKS)} tasks: {tally}")
    assert tried == MUTANTS_PER_TASK * len(TASKS) and sum(tally.get(k, 0) for k in FAILS) > tried // 2


if __name__ == "__main__":
    fuzz()
