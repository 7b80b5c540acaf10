"""The verdict of one evaluation, built in one place from what each stage returned.

The stages (fitness.engine.correctness, replay, measuring) each return a frozen record of what they
found, a failure inside it when they failed the candidate; none of them writes the verdict. The
evaluator gathers the records in an Evaluation and `verdict_from` turns it into the Verdict the
archives store, applying the stages in the cascade's order: a later stage's failure overrides an
earlier reason, as a later check overrides what an earlier one let through.
"""
from __future__ import annotations

from dataclasses import dataclass

from fitness.common.flags import NOT_REPLAYABLE, Flag
from fitness.engine.correctness import CorrectnessResult
from fitness.engine.replay import ReplayResult
from fitness.engine.trials import TimingResult
from fitness.engine.verdict import TASK_CODE_RAISED, Failure, Verdict, biased_aa


@dataclass(frozen=True)
class CleanChild:
    """On a GPU, the clean child that replays and times (fitness.engine.evaluator): the seconds
    the candidate waited for it and held it, and its loss (its zygote failed, or it died between
    the stages: a failure of the replay's child, found after the stages it ran)."""
    wait_s: float | None = None
    held_s: float | None = None
    failure: Failure | None = None


@dataclass(frozen=True)
class Evaluation:
    """Everything one evaluation found, for verdict_from."""
    task: str
    sandbox: str  # the evaluator's sandbox, in words
    baseline: str  # what the candidate is timed against, in words
    flags: tuple[str, ...] = ()  # the run's own: an A/A sentinel, no sandbox
    gpu: bool = False
    timed: bool = True  # timing was asked for
    gate: Failure | None = None  # the static gate refused the source (nothing else ran)
    correctness: CorrectnessResult | None = None
    replay: ReplayResult | None = None
    timing: TimingResult | None = None
    clean: CleanChild | None = None
    aa_source: str | None = None  # the baseline's own code, evaluated as a candidate: an A/A to check
    replayed: str = ""  # what the replay established, in words, for the pass reason


def verdict_from(e: Evaluation, elapsed_s: float = 0.0) -> Verdict:
    """The verdict of an evaluation: each stage's finding in the cascade's order, the notes of a
    candidate not timed, and the reason of one that passed."""
    v = Verdict(task=e.task, sandbox=e.sandbox, baseline=e.baseline, flags=list(e.flags))
    if e.gate is not None:
        _failed(v, e.gate)
    elif e.correctness is not None:
        _correctness(v, e.correctness)
        _later_stages(v, e)
        if v.passed and not e.gpu:
            v.timing = "not timed: no GPU here; correctness ran under the Triton interpreter on CPU"
            v.flags.append(Flag.UNTIMED_NO_GPU)
        elif v.passed and not e.timed:
            v.timing = "not timed: asked not to (--no-time)"
    if v.passed and not v.reason:
        v.reason = (f"passed {len(v.cases)} correctness cases "
                    f"({sum(c['split'] == 'heldout' for c in v.cases)} held-out); " + e.replayed)
        if v.timing.startswith("not timed"):
            v.reason += "; " + v.timing
    v.elapsed_s = elapsed_s
    return v


def reference_verdict(e: Evaluation, device: str, problem: str) -> Verdict:
    """validate's verdict on a task with no Triton starting kernel (KernelBench): its reference
    alone was run here; `problem` says why it cannot be, "" when it runs."""
    v = verdict_from(e)
    v.device = device
    if problem:
        v.reason = problem
        v.flags.append(Flag.INVALID_HERE)
    else:
        v.stage, v.correct, v.heldout_correct = "correct", True, True
        v.reason = "the reference runs here (the suite has no Triton starting kernel to time)"
    return v


def task_code_verdict(e: Evaluation, device: str, error: str) -> Verdict:
    """validate's verdict on a task whose own code raised (a reference failing on a drawn shape):
    that task fails, the others are validated."""
    v = verdict_from(e)
    v.device, v.reason = device, f"{TASK_CODE_RAISED}: {error}"
    return v


def _failed(v: Verdict, failure: Failure) -> None:
    v.reason, v.stage = failure.reason, failure.stage
    v.flags += failure.flags
    if NOT_REPLAYABLE in failure.reason and Flag.NOT_REPLAYABLE not in v.flags:  # the engine's limit, named
        v.flags.append(Flag.NOT_REPLAYABLE)


def _correctness(v: Verdict, c: CorrectnessResult) -> None:
    v.device, v.sandbox = c.device, c.sandbox or v.sandbox
    v.phases.update(c.phases)
    if c.failure is not None:
        _failed(v, c.failure)
    v.stage, v.cases, v.correct, v.heldout_correct = c.stage, list(c.cases), c.correct, c.heldout_correct


def _later_stages(v: Verdict, e: Evaluation) -> None:
    """The replay's and the timing's findings, and the clean child's (on a GPU: both stages ran in
    it, and its phases frame theirs). A failed replay or a lost clean child leaves the candidate
    correct on nothing; a failed timing makes it no parent (not correct) at the stage it reached."""
    if e.clean is not None and e.clean.wait_s is not None:
        v.phases["clean_wait_s"] = e.clean.wait_s
    if e.replay is not None:
        v.phases.update(e.replay.phases)
        if e.replay.failure is not None:
            _not_correct(v, e.replay.failure)
    if e.timing is not None:
        _timing(v, e.timing)
    if e.clean is not None and e.clean.held_s is not None:
        v.phases["clean_held_s"] = e.clean.held_s
    if e.clean is not None and e.clean.failure is not None:
        _not_correct(v, e.clean.failure)
    if v.stage == "timed" and e.aa_source is not None:
        biased_aa(v, e.aa_source)


def _not_correct(v: Verdict, failure: Failure) -> None:
    _failed(v, failure)
    v.correct = v.heldout_correct = False


def _timing(v: Verdict, t: TimingResult) -> None:
    v.phases.update(t.phases)
    v.times, v.speedup, v.timing, v.configs = list(t.times), t.speedup, t.timing, list(t.configs)
    v.flags += t.flags
    if t.failure is not None:
        _failed(v, t.failure)
        v.correct = False
    if t.timed:
        v.stage = "timed"
