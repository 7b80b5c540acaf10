"""The correctness stage: a candidate's cases run in a fresh child of its own, one request each,
and what the verdict says of them.

The child (fitness.process.child) imports the candidate and runs each case it is sent, learning a case
only when it runs it; its outputs are compared here, in the engine, with the oracle the task's
judge names (fitness.engine.judges). Each call's launch trace comes back too, for the replay that
decides whether the candidate's own kernels did the work (fitness.engine.evaluator). Where the judge
replays, every judged call must come back with a trace that matches it (as many outputs, of the
shapes and dtypes the call returned): a call without one fails the candidate, and every call's
trace is replayed (Traces.calls), never only a sample of them.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import torch

from fitness.common.flags import Flag
from fitness.engine.pool import CancelCheck, WorkerFailure
from fitness.engine.verdict import Verdict
from suites.task import Task

if TYPE_CHECKING:
    from fitness.engine.evaluator import Evaluator


# A case's outputs are compared here while the child runs the next case (one case ahead, so no
# more than two cases' outputs are held at once), and the child's slot is given back before the
# last comparison ends: H100 builtin, the engine's comparisons had held each
# candidate's correctness slot 0.74-0.81 s beside the child's own 0.9 s, and those slots bounded
# the steady rate (78-84% busy). Lives as long as the engine.
_CHECKS = ThreadPoolExecutor(16, thread_name_prefix="output-checks")


def _timed_check(check: Callable[[dict, dict], str], ev: Evaluator, case: dict, reply: dict) -> tuple[str, float]:
    t = time.monotonic()
    return check(case, reply), time.monotonic() - t


def _collect(v: Verdict, pending: list[tuple[dict, Future]]) -> float:
    """The comparisons' verdicts, in the cases' order, into `v.cases`; their summed seconds."""
    spent = 0.0
    for case, done in pending:
        problem, seconds = done.result()
        spent += seconds
        v.cases.append({**case, "ok": not problem, "error": problem})
    return spent


class Traces(dict):
    """The traces by (split, shape, dtype), the last seed's call of each (what the timing times),
    and `calls`: every judged call's (case, trace) in order, each of which the replay runs."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[dict, dict]] = []


def trace_problem(reply: dict) -> str:
    """'' or why a call's trace cannot stand for the call: missing, or naming other outputs than
    the call returned (their count, shapes, dtypes)."""
    trace, outs = reply.get("trace"), reply.get("outputs")
    if not isinstance(trace, dict):
        return "the call came back without a trace of what it launched: it cannot be replayed"
    recorded = trace.get("outputs")
    if not isinstance(recorded, list) or not isinstance(outs, list) or len(recorded) != len(outs):
        return (f"the call's trace records {len(recorded) if isinstance(recorded, list) else 'no'} outputs, "
                f"the call returned {len(outs) if isinstance(outs, list) else 'none'}")
    for i, (r, o) in enumerate(zip(recorded, outs)):
        ref = r.get("__t__") if isinstance(r, dict) else None
        if not isinstance(ref, dict) or not isinstance(o, torch.Tensor) or ref.get("size") != list(o.shape) \
                or ref.get("dtype") != str(o.dtype).removeprefix("torch."):
            return f"the call's trace does not record its output {i} (shape and dtype differ from what it returned)"
    return ""


def trace_key(case: dict) -> tuple:
    """One trace per (split, shape, dtype): the last seed's call (autotuning and compiles done)."""
    return case["split"], repr(sorted(case["shape"].items())), case["dtype"]


def add_phases(total: dict, more: dict | None) -> None:
    for k, ms in (more or {}).items():
        total[k] = round(total.get(k, 0.0) + ms, 2)


def run_correctness(ev: Evaluator, task: Task, source: str, v: Verdict, cancel: CancelCheck | None = None,
                    order: float | None = None) -> Traces | None:
    """Runs the cases in a fresh child, one request each; the traces of the calls by
    (split, shape, dtype), or None when the candidate failed."""
    spec = ev.task_spec(task)
    planned = ev.judge(task).cases(v, cancel)
    if planned is None:
        return None
    cases, check = planned
    t0 = time.monotonic()
    traces = Traces()
    failed: dict | None = None
    reply: dict = {}
    pending: list[tuple[dict, Future]] = []  # comparisons under way, in the cases' order
    try:
        with ev.pool.child(cancel, order) as child:
            v.device = child.info.get("device", "")
            v.sandbox = f"{ev.sandbox.description}; candidate's process: {child.info.get('how', '?')}"
            reply = child.request({"op": "import", "source": source, "task": spec}, ev.config.timeout_s)
            v.stage = reply.get("stage", "parse")
            v.phases["worker_ms"] = dict(reply.get("phase_ms") or {})
            for case in cases if not reply.get("error") else []:
                if case["split"] != "timing":
                    ev.judge(task).prefetch(case)
                reply = child.request({"op": "case", "task": spec, "case": case}, ev.config.timeout_s)
                add_phases(v.phases["worker_ms"], reply.get("phase_ms"))
                if reply.get("error"):
                    failed = case
                    break
                v.stage = "call"
                if ev.judge(task).replays and trace_problem(reply):  # fail closed: every call is replayed
                    failed, reply = case, {"error": trace_problem(reply)}
                    break
                if reply.get("trace") is not None:
                    traces[trace_key(case)] = (case, reply["trace"])
                    traces.calls.append((case, reply["trace"]))
                if case["split"] != "timing":
                    pending.append((case, _CHECKS.submit(_timed_check, check, ev, case, reply)))
                    if len(pending) > 1:  # at most two cases' outputs held: one compared, one coming
                        pending[-2][1].result()
        held = time.monotonic() - t0
    except WorkerFailure as e:
        v.reason = str(e)
        v.flags.append(Flag.WORKER_REPLACED)
        return None
    v.phases.update(worker_s=round(held, 3), reference_compare_s=round(_collect(v, pending), 3))
    _note_error(v, reply, failed)
    return traces if judge_cases(v, cases, failed) else None


def _note_error(v: Verdict, reply: dict, failed: dict | None) -> None:
    """The child's error, if its last reply carried one, into the verdict: the failed case,
    the reason, the stage it reached and whether the child was replaced."""
    if reply.get("error"):
        v.cases.append({**(failed or {}), "ok": False, "error": reply["error"]})
        v.reason = reply["error"] if not failed else \
            f"{failed.get('split')} case {failed.get('shape')} {failed.get('dtype')}: {reply['error']}"
        if reply.get("fatal"):
            v.flags.append(Flag.WORKER_REPLACED)
        v.stage = reply.get("stage", "parse")


def judge_cases(v: Verdict, cases: list[dict], failed: dict | None) -> bool:
    """Whether the candidate goes on (to the replay and timing); sets its correct and
    held-out flags, and the reason of a wrong result."""
    tuning = [c for c in v.cases if c.get("split") == "tuning"]
    heldout = [c for c in v.cases if c.get("split") == "heldout"]
    n_tuning = sum(c["split"] == "tuning" for c in cases)
    n_heldout = sum(c["split"] == "heldout" for c in cases)
    v.correct = len(tuning) == n_tuning and all(c["ok"] for c in tuning)
    v.heldout_correct = len(heldout) == n_heldout and all(c["ok"] for c in heldout)
    # a kernel right on every tuning case goes on to timing even when a held-out case failed:
    # held-out shapes decide what is exported, not what the search breeds from
    if failed is not None and not (v.correct and failed.get("split") == "heldout"):
        return False
    bad = next((c for c in v.cases if not c["ok"]), None)
    if bad:
        if not v.reason:
            v.reason = f"wrong result on {bad['split']} shape {bad['shape']} {bad['dtype']} " \
                       f"(seed {bad['seed']}): {bad['error']}"
        if not v.correct:
            return False
    v.stage = "correct"
    return True
