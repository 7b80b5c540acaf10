"""The replay stage: each call a candidate's child recorded, replayed alone in a fresh child on
inputs from a seed the candidate never saw, and compared with the engine's reference.

Separate from fitness.engine.evaluator, which runs the whole cascade, as fitness.engine.correctness is: the
replay is one stage of it with its own checks (an in-place task's outputs, the torch work counted
on the replay, each call's result). It is handed what it needs (the stage settings, the engine's
oracle, a pool or a clean child) and returns a ReplayResult; it never reaches the evaluator.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from fitness.clean.compiled import ReplayError
from fitness.clean.kernel_source import constexpr_params
from fitness.clean.trace_check import Constexprs, check_trace, first_difference, program_of
from fitness.common.flags import NOT_REPLAYABLE
from fitness.common.inputs import TORCH_WORK_SHARE
from fitness.common.messages import Replay, ReplayItem
from fitness.common.replies import ReplayResult as ReplayedCall
from fitness.engine.correctness import Traces
from fitness.engine.judges import Judge
from fitness.engine.launch_configs import build_of
from fitness.engine.outputs import OutputsChecker
from fitness.engine.pool import CancelCheck, ChildProcess, WorkerFailure, WorkerPool
from fitness.engine.settings import StageSettings
from fitness.engine.verdict import Failure
from suites.task import Task

# a replay's references computed while its child runs, this many ahead of the comparisons (each up
# to 64 MiB in float64 on builtin; fitness.common.reference.DEVICE_BYTES bounds what the cache holds)
REFERENCES_AHEAD = 3


@dataclass(frozen=True)
class ReplayResult:
    """What the replay found: nothing wrong, or the failure of the first call that did not check
    out (the cascade stops there); `phases`: its seconds, once the replaying child answered."""
    failure: Failure | None = None
    phases: dict = field(default_factory=dict)


def _failed(reason: str, phases: dict | None = None) -> ReplayResult:
    """A replay that failed: the candidate's own kernels did not do the work (so the verdict
    records it at the call, correct on nothing)."""
    return ReplayResult(Failure(reason, "call"), phases or {})


class Replayer:
    def __init__(self, pool: WorkerPool, settings: StageSettings, outputs: OutputsChecker):
        """`pool`: where a replay runs without a clean child of its own (the interpreter's);
        `outputs`: the engine's reference, which every replayed call is compared with."""
        self.pool, self.settings, self.outputs = pool, settings, outputs

    def run(self, task: Task, judge: Judge, source: str, traces: dict, cancel: CancelCheck | None = None,
            clean: ChildProcess | None = None) -> ReplayResult:
        """Each recorded call replayed alone, in a fresh child (`clean`, on a GPU), on inputs from
        a new seed, and compared with the engine's reference: the candidate's own kernels did the
        work, or it fails. Script tasks' benchmark calls are checked in the timing instead (their
        reference is the suite's kernel)."""
        calls = traces.calls if isinstance(traces, Traces) else list(traces.values())
        items = tuple(ReplayItem(case=case, trace=trace) for case, trace in judge.replayed_calls(calls)
                      if judge.replays)
        if not items:
            return ReplayResult()
        problem = next((p for p in (inplace_problem(task, item.trace) for item in items) if p), "") \
            or program_problem(calls, constexpr_params(source) if self.settings.interpret else None)
        if problem:
            return _failed(f"replay: {problem}")
        for item in items[:REFERENCES_AHEAD]:
            judge.prefetch(item.case)
        req = Replay(task=self.settings.task_spec(task), items=items,
                     source=source or None)
        t0 = time.monotonic()
        try:
            reply = clean.ask(req, 2 * self.settings.timeout_s) if clean is not None else \
                self.pool.ask(req, 2 * self.settings.timeout_s, cancel)
        except WorkerFailure as e:
            return _failed(f"replay: {e}")
        phases = {"replay_s": round(time.monotonic() - t0, 3), "replay_child_ms": dict(reply.phase_ms)}
        if reply.error:
            return _failed(f"replay: {reply.error}", phases)
        results = reply.payload.results if reply.payload is not None else None
        if results is None or len(results) != len(items):  # fail closed: every call replayed
            return _failed(f"replay: {len(items)} recorded calls sent, the replaying child answered "
                           f"{len(results) if results is not None else 'none'} of them", phases)
        return ReplayResult(self._judge(task, judge, items, results), phases)

    def _judge(self, task: Task, judge: Judge, items: tuple[ReplayItem, ...],
               results: tuple[ReplayedCall, ...]) -> Failure | None:
        """The first replayed call that did not check out, if any: an error, torch work beyond its
        share, or outputs the engine's reference does not match."""
        for k, (item, res) in enumerate(zip(items, results)):
            case = item.case
            if k + REFERENCES_AHEAD < len(items):
                judge.prefetch(items[k + REFERENCES_AHEAD].case)
            where = f"{case['split']} shape {case['shape']} {case['dtype']}"
            if res.error:
                return Failure(f"{res.error} ({where})", "call")
            produced = sum(o.numel() for o in res.outputs)
            allowed = task.torch_ops or task.script is not None  # a script's torch work: against its reference's
            if not allowed and res.torch_elements > max(1024, TORCH_WORK_SHARE * produced):
                by_size = sorted(res.torch_ops.items(), key=lambda kv: -kv[1])
                ops = ", ".join(f"{k} ({n} elements)" for k, n in by_size)
                return Failure(f"torch did work outside Triton kernels (counted on the replay): {ops}", "call")
            problem = judge.check_replayed(case, res.outputs)
            if problem and res.stale_reads:  # the recorded program went on with the recorded values
                return Failure(f"replay: {NOT_REPLAYABLE}the call's host code reads device values that differ on "
                               f"fresh inputs ({'; '.join(res.stale_reads)}; {where}), and a replay cannot run "
                               f"host code again: the recorded program, replayed, gave: {problem}", "call")
            if problem:
                return Failure(f"replay: the recorded kernels, replayed alone on fresh inputs ({where}), "
                               f"gave a wrong result: {problem}; work done outside the candidate's Triton "
                               f"kernels (torch, numpy, Python, an answer prepared earlier) does not count", "call")
        return None


def program_problem(calls: list[tuple[dict, dict]], constexprs: Constexprs | None = None) -> str:
    """'' when every call of one shape and dtype ran one program (fitness.clean.trace_check.program_of):
    a candidate cannot pick what it is judged on (a safe kernel for inputs that look like a variant,
    another for the call it guesses is timed), since the timed trace is one of these calls."""
    seen: dict[tuple, tuple[dict, tuple]] = {}
    for case, trace in calls:
        try:
            check_trace(trace)
            prog = program_of(trace, constexprs, build_of)
        except ReplayError:
            continue  # the replay of that call names what is wrong with it
        key = (repr(sorted(case["shape"].items())), case["dtype"])
        if key not in seen:
            seen[key] = (case, prog)
        elif seen[key][1] != prog:
            first = seen[key][0]
            return (f"the call's program changes between calls of shape {case['shape']} {case['dtype']} (seed "
                    f"{first.get('seed')} and seed {case.get('seed')}, {case.get('variant') or 'plain'} inputs): "
                    f"{first_difference(seen[key][1], prog)}; every call of a shape must launch the same kernels "
                    "and ops, whatever its values")
    return ""


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
