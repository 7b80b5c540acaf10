"""The correctness stage: a candidate's cases run in a fresh child of its own, one request each,
and what they found (a CorrectnessResult; fitness.engine.outcome makes the verdict of it).

The child (fitness.process.child) imports the candidate and runs each case it is sent, learning a case
only when it runs it; its outputs are compared here, in the engine, with the oracle the task's
judge names (fitness.engine.judges). Each call's launch trace comes back too, for the replay that
decides whether the candidate's own kernels did the work (fitness.engine.replay). Where the judge
replays, every judged call must come back with a trace that matches it (as many outputs, of the
shapes and dtypes the call returned): a call without one fails the candidate, and every call's
trace is replayed (Traces.calls), never only a sample of them.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from fitness.common.flags import Flag
from fitness.common.messages import Import, RunCase
from fitness.common.replies import CaseRan, Reply
from fitness.engine.judges import Check, Judge
from fitness.engine.pool import CancelCheck, WorkerFailure, WorkerPool
from fitness.engine.settings import StageSettings
from fitness.engine.verdict import Failure
from suites.script import tensors_of
from suites.task import Task

# A case's outputs are compared here while the child runs the next case (one case ahead, so no
# more than two cases' outputs are held at once), and the child's slot is given back before the
# last comparison ends: H100 builtin, the engine's comparisons had held each
# candidate's correctness slot 0.74-0.81 s beside the child's own 0.9 s, and those slots bounded
# the steady rate (78-84% busy). Lives as long as the engine.
_CHECKS = ThreadPoolExecutor(16, thread_name_prefix="output-checks")


def _timed_check(check: Callable[[dict, CaseRan], str], case: dict, ran: CaseRan) -> tuple[str, float]:
    t = time.monotonic()
    return check(case, ran), time.monotonic() - t


def _collect(pending: list[tuple[dict, Future]]) -> tuple[list[dict], float]:
    """The comparisons' verdicts, in the cases' order; their summed seconds."""
    spent = 0.0
    cases = []
    for case, done in pending:
        problem, seconds = done.result()
        spent += seconds
        cases.append({**case, "ok": not problem, "error": problem})
    return cases, spent


class Traces(dict):
    """The traces by (split, shape, dtype), the last seed's call of each (what the timing times),
    and `calls`: every judged call's (case, trace) in order, each of which the replay runs."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[dict, dict]] = []


def trace_problem(ran: CaseRan) -> str:
    """'' or why a call's trace cannot stand for the call: missing, or naming other outputs than
    the call returned (their count, shapes, dtypes)."""
    trace = ran.trace
    outs = ran.outputs if ran.outputs is not None or ran.tree is None else tensors_of(ran.tree)  # a script's call
    if trace is None:
        return "the call came back without a trace of what it launched: it cannot be replayed"
    recorded = trace.get("outputs")
    if not isinstance(recorded, list) or outs is None or len(recorded) != len(outs):
        return (f"the call's trace records {len(recorded) if isinstance(recorded, list) else 'no'} outputs, "
                f"the call returned {len(outs) if outs is not None else 'none'}")
    for i, (r, o) in enumerate(zip(recorded, outs)):
        ref = r.get("__t__") if isinstance(r, dict) else None
        if not isinstance(ref, dict) or not isinstance(o, torch.Tensor) or ref.get("size") != list(o.shape) \
                or ref.get("dtype") != str(o.dtype).removeprefix("torch."):
            return f"the call's trace does not record its output {i} (shape and dtype differ from what it returned)"
    return ""


def trace_key(case: dict) -> tuple:
    """One trace per (split, shape, dtype): the last seed's call (autotuning and compiles done)."""
    return case["split"], repr(sorted(case["shape"].items())), case["dtype"]


def add_phases(total: dict, more: dict[str, float]) -> None:
    for k, ms in more.items():
        total[k] = round(total.get(k, 0.0) + ms, 2)


@dataclass(frozen=True)
class CorrectnessResult:
    """What the correctness stage found. `traces`: the calls for the replay and the timing, None
    when the cascade stops here; `failure`: why the candidate is not correct (a held-out case's
    only: it still goes on, since held-out shapes decide what is exported, not what is bred from)."""
    stage: str
    cases: tuple[dict, ...] = ()
    traces: Traces | None = None
    failure: Failure | None = None
    correct: bool = False  # every tuning case matched
    heldout_correct: bool = False  # every held-out case matched
    device: str = ""  # what the child ran on ('' : no child was had)
    sandbox: str = ""  # the candidate's process's sandbox ('' : no child was had)
    phases: dict = field(default_factory=dict)


@dataclass
class Progress:
    """One correctness run's progress, as its child answers (local to the run; the stage's result
    is made from it once the child is given back)."""
    stage: str = "parse"
    device: str = ""
    sandbox: str = ""
    phases: dict = field(default_factory=dict)
    reply: Reply[Any] = field(default_factory=lambda: Reply(None))  # the child's last reply
    failed: dict | None = None  # the case whose reply carried an error
    traces: Traces = field(default_factory=Traces)
    pending: list[tuple[dict, Future]] = field(default_factory=list)  # comparisons under way, in order


class Correctness:
    def __init__(self, pool: WorkerPool, settings: StageSettings, sandbox: str):
        """`pool`: the correctness workers; `sandbox`: how their children are isolated, in words."""
        self.pool, self.settings, self.sandbox = pool, settings, sandbox

    def run(self, task: Task, judge: Judge, source: str, cancel: CancelCheck | None = None,
            order: float | None = None) -> CorrectnessResult:
        """Runs the cases the task's `judge` plans in a fresh child, one request each, and judges
        the replies; the traces of the calls by (split, shape, dtype) go on when it passed."""
        planned = judge.cases(cancel)
        if isinstance(planned, Failure):
            return CorrectnessResult(planned.stage, failure=planned, device=self.pool.device())
        cases, check = planned
        t0 = time.monotonic()
        run = Progress()
        try:
            self._converse(run, task, judge, source, (cases, check), cancel, order)
            held = time.monotonic() - t0
        except WorkerFailure as e:
            return CorrectnessResult(run.stage, failure=Failure(str(e), run.stage, (Flag.WORKER_REPLACED,)),
                                     device=run.device, sandbox=run.sandbox, phases=run.phases)
        compared, spent = _collect(run.pending)
        run.phases.update(worker_s=round(held, 3), reference_compare_s=round(spent, 3))
        return judged(run, compared, cases)

    def _converse(self, run: Progress, task: Task, judge: Judge, source: str, planned: tuple[list[dict], Check],
                  cancel: CancelCheck | None, order: float | None) -> None:
        """The child's conversation: the import, then each case until one fails; each reply's
        outputs compared beside the next case, and its trace kept."""
        cases, check = planned
        spec, timeout = self.settings.task_spec(task), self.settings.timeout_s
        with self.pool.child(cancel, order) as child:
            ready = child.ready
            run.device = ready.device if ready is not None else ""
            run.sandbox = f"{self.sandbox}; candidate's process: {ready.how if ready is not None else '?'}"
            run.reply = child.ask(Import(source=source, task=spec), timeout)
            run.stage = run.reply.stage or "parse"
            run.phases["worker_ms"] = dict(run.reply.phase_ms)
            for case in cases if not run.reply.error else []:
                if case["split"] != "timing":
                    judge.prefetch(case)
                reply = run.reply = child.ask(RunCase(task=spec, case=case), timeout)
                add_phases(run.phases["worker_ms"], reply.phase_ms)
                ran = reply.payload
                if reply.error or ran is None:
                    run.failed = case
                    return
                run.stage = "call"
                if judge.replays and judge.traced(case) and trace_problem(ran):  # fail closed: every call replayed
                    run.failed, run.reply = case, Reply.failed(trace_problem(ran))
                    return
                if ran.trace is not None:
                    run.traces[trace_key(case)] = (case, ran.trace)
                    run.traces.calls.append((case, ran.trace))
                if case["split"] != "timing":
                    run.pending.append((case, _CHECKS.submit(_timed_check, check, case, ran)))
                    if len(run.pending) > 1:  # at most two cases' outputs held: one compared, one coming
                        run.pending[-2][1].result()


def judged(run: Progress, compared: list[dict], cases: list[dict]) -> CorrectnessResult:
    """The stage's result from the run: the child's error, if its last reply carried one (the
    failed case, the reason, the stage it reached, whether the child was replaced), then the
    correct and held-out flags, and whether the candidate goes on (to the replay and timing)."""
    reply, failed = run.reply, run.failed
    got, reason, stage = list(compared), "", run.stage
    flags: tuple[str, ...] = ()
    if reply.error:
        got.append({**(failed or {}), "ok": False, "error": reply.error})
        reason = reply.error if not failed else \
            f"{failed.get('split')} case {failed.get('shape')} {failed.get('dtype')}: {reply.error}"
        flags = (Flag.WORKER_REPLACED,) if reply.fatal else ()
        stage = reply.stage or "parse"
    correct, heldout_correct = (_all_right(got, cases, split) for split in ("tuning", "heldout"))
    # a kernel right on every tuning case goes on to timing even when a held-out case failed:
    # held-out shapes decide what is exported, not what the search breeds from
    goes_on = failed is None or (correct and failed.get("split") == "heldout")
    bad = next((c for c in got if not c["ok"]), None)
    if goes_on and bad:
        reason = reason or f"wrong result on {bad['split']} shape {bad['shape']} {bad['dtype']} " \
                           f"(seed {bad['seed']}): {bad['error']}"
        goes_on = correct
    if goes_on:
        stage = "correct"
    failure = Failure(reason, stage, flags) if reason or flags else None
    return CorrectnessResult(stage, tuple(got), run.traces if goes_on else None, failure, correct, heldout_correct,
                             run.device, run.sandbox, run.phases)


def _all_right(got: list[dict], cases: list[dict], split: str) -> bool:
    """Every planned case of the split came back, and right."""
    back = [c for c in got if c.get("split") == split]
    return len(back) == sum(c["split"] == split for c in cases) and all(c["ok"] for c in back)
