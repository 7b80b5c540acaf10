"""The replay stage: each call a candidate's child recorded, replayed alone in a fresh child on
inputs from a seed the candidate never saw, and compared with the engine's reference.

Separate from fitness.engine.evaluator, which runs the whole cascade, as fitness.engine.correctness is: the
replay is one stage of it with its own checks (an in-place task's outputs, the torch work counted
on the replay, each call's result), and it reaches the evaluator only through what it is handed.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fitness.common.inputs import TORCH_WORK_SHARE
from fitness.engine.correctness import Traces
from fitness.engine.judges import fresh_seed
from fitness.engine.pool import CancelCheck, ChildProcess, WorkerFailure
from fitness.engine.verdict import Verdict
from suites.task import Task

if TYPE_CHECKING:
    from fitness.engine.evaluator import Evaluator

# a replay's references computed while its child runs, this many ahead of the comparisons (each up
# to 64 MiB in float64 on builtin; fitness.common.reference.DEVICE_BYTES bounds what the cache holds)
REFERENCES_AHEAD = 3


def replay(ev: Evaluator, task: Task, source: str, traces: dict, v: Verdict, cancel: CancelCheck | None = None,
           clean: ChildProcess | None = None) -> dict | None:
    """Each recorded call replayed alone, in a fresh child (`clean`, on a GPU), on inputs from
    a new seed, and compared with the engine's reference: the candidate's own kernels did the
    work, or it fails. Script tasks' benchmark calls are checked in the timing instead (their
    reference is the suite's kernel)."""
    calls = traces.calls if isinstance(traces, Traces) else list(traces.values())
    items = [{"case": {**case, "seed": fresh_seed()}, "trace": trace} for case, trace in calls
             if ev.judge(task).replays]
    if not items:
        return traces
    problem = next((p for p in (inplace_problem(task, item["trace"]) for item in items) if p), "")
    if problem:
        return ev._fail(v, f"replay: {problem}")
    for item in items[:REFERENCES_AHEAD]:
        ev.prefetch_reference(task, item["case"])
    req = {"op": "replay", "task": ev.task_spec(task), "items": items,
           "source": source if ev.interpret else None}
    t0 = time.monotonic()
    try:
        reply = clean.request(req, 2 * ev.config.timeout_s) if clean is not None else \
            ev.pool.request(req, 2 * ev.config.timeout_s, cancel)
    except WorkerFailure as e:
        return ev._fail(v, f"replay: {e}")
    v.phases["replay_s"] = round(time.monotonic() - t0, 3)
    v.phases["replay_child_ms"] = dict(reply.get("phase_ms") or {})
    if reply.get("error"):
        return ev._fail(v, f"replay: {reply['error']}")
    results = reply.get("results")
    if not isinstance(results, list) or len(results) != len(items):  # fail closed: every call replayed
        return ev._fail(v, f"replay: {len(items)} recorded calls sent, the replaying child answered "
                           f"{len(results) if isinstance(results, list) else 'none'} of them")
    for k, (item, res) in enumerate(zip(items, results)):
        case = item["case"]
        if k + REFERENCES_AHEAD < len(items):
            ev.prefetch_reference(task, items[k + REFERENCES_AHEAD]["case"])
        where = f"{case['split']} shape {case['shape']} {case['dtype']}"
        if res.get("error"):
            return ev._fail(v, f"{res['error']} ({where})")
        produced = sum(o.numel() for o in res["outputs"])
        if not task.torch_ops and res["torch_elements"] > max(1024, TORCH_WORK_SHARE * produced):
            by_size = sorted(res["torch_ops"].items(), key=lambda kv: -kv[1])
            ops = ", ".join(f"{k} ({n} elements)" for k, n in by_size)
            return ev._fail(v, f"torch did work outside Triton kernels (counted on the replay): {ops}")
        problem = ev.check_case(task, case, res["outputs"])
        if problem:
            return ev._fail(v, f"replay: the recorded kernels, replayed alone on fresh inputs ({where}), "
                               f"gave a wrong result: {problem}; work done outside the candidate's Triton "
                               f"kernels (torch, numpy, Python, an answer prepared earlier) does not count")
    return traces


def inplace_problem(task: Task, trace: Any) -> str:
    """'' when an INPLACE task's trace names, as its outputs, exactly the declared inputs (whole,
    as given): what the candidate's process reports is not evidence, and a result written
    elsewhere would be correct here and leave the user's tensors unchanged."""
    if not task.inplace:
        return ""
    try:
        outs, buffers = trace["outputs"], trace["buffers"]
        refs = [o["__t__"] for o in outs]
        origins = [buffers[r["t"]] for r in refs]
    except (KeyError, TypeError, IndexError):
        return "the trace's outputs cannot be read as the task's in-place inputs"
    got = [(b.get("from"), b.get("index")) for b in origins]
    want = [("input", i) for i in task.inplace]
    if got != want:
        return (f"the outputs of an in-place task must be its inputs {', '.join(map(str, task.inplace))} "
                "updated where they are; this call's results are elsewhere")
    return ""
