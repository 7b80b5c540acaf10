"""What the evaluator says about one candidate."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Sequence

from fitness.common.flags import SUSPICIOUS_SPEEDUP as SUSPICIOUS_SPEEDUP  # re-exported
from fitness.common.flags import Flag
from fitness.common.timing_row import TimingRow
from fitness.engine.launch_configs import KernelConfig
from fitness.engine.timing_hazards import timing_hazards
from suites.validation import short_reason

if TYPE_CHECKING:  # only named: a verdict is read where torch (which the replies import) is not needed
    from fitness.common.replies import PeakFigures

# the cascade, in order; `stage` is the last one a candidate reached ("none": it failed the gate)
STAGES = ("none", "parse", "compile", "call", "correct", "timed")
# a verdict's reason when the task's own code (its reference, its input maker) raised, not the kernel's
TASK_CODE_RAISED = "the task's own code raised"


@dataclass(frozen=True)
class Failure:
    """Why a stage failed a candidate: the one way a stage says so (inside its result record;
    fitness.engine.outcome.verdict_from turns it into the verdict's reason, stage and flags)."""
    reason: str
    stage: str  # the stage the verdict records (STAGES)
    flags: tuple[str, ...] = ()


@dataclass
class Verdict:
    task: str
    stage: str = "none"
    correct: bool = False  # every tuning case matched the reference
    heldout_correct: bool = False  # every held-out case matched too
    speedup: float | None = None  # geometric mean over timed shapes; None when not timed
    reason: str = ""
    flags: list[str] = field(default_factory=list)
    times: list[TimingRow] = field(default_factory=list)  # per timed shape: candidate/baseline/floor ms
    cases: list[dict] = field(default_factory=list)  # per correctness case: split, shape, dtype, ok
    device: str = ""
    unit: str = ""  # under --cluster: the evaluation unit (host:gpu:pid) that ran it
    sandbox: str = ""
    timing: str = ""  # how (or why not) it was timed
    configs: list[KernelConfig] = field(default_factory=list)  # the kernel builds timed, autotuners' picks included
    baseline: str = ""
    elapsed_s: float = 0.0
    phases: dict = field(default_factory=dict)  # seconds spent per phase, for throughput tuning

    @property
    def passed(self) -> bool:
        """Correct on tuning and held-out shapes: the bar for fitness and for export."""
        return self.correct and self.heldout_correct and STAGES.index(self.stage) >= STAGES.index("correct")

    def failed_at(self) -> str | None:
        """Where the candidate failed, as a user names it (`stage` is the last stage it got
        through: `none` for a static-gate refusal, `compile` for an exception its wrapper raised);
        None when it passed."""
        if self.passed:
            return None
        if self.reason.startswith("static gate"):
            return "static gate"
        if STAGES.index(self.stage) >= STAGES.index("correct"):
            return "held-out" if self.correct else "correct"
        return STAGES[STAGES.index(self.stage) + 1]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["times"] = [r.to_dict() for r in self.times]  # asdict would write floor_ms/speedup None, not leave them out
        d["passed"] = self.passed
        return d


# An evaluation of the baseline's own code is an A/A; one that times it this far from 1.0x says the
# two sides are not timed alike, not noise (A/A under a search's load: p90 0.4-3%). H100: the
# suite's cross_entropy2 prints its output tensors; its eager baseline took 4.6-8.0 ms a call,
# the replay of the same kernel's launches 0.17-0.62 ms: 23.7x "faster" than itself.
AA_BIAS_LIMIT = 1.25


def biased_aa(v: Verdict, source: str = "") -> None:
    """An A/A timing (the baseline's own code, `source`, as the candidate) far from 1.0x: a timing
    failure that names why (what in that code does it, where the source shows it), so the task
    stops as one whose starting kernel cannot be timed."""
    if v.speedup is None or abs(math.log(v.speedup)) <= math.log(AA_BIAS_LIMIT):
        return
    slow = max(v.times, key=lambda r: abs(math.log(r.baseline_ms / r.candidate_ms)), default=None)
    where = (f" (e.g. {slow.shape}: the baseline {slow.baseline_ms:.3f} ms, its replayed kernels "
             f"{slow.candidate_ms:.3f} ms, {slow.method})") if slow else ""
    hazards = timing_hazards(source)
    why = ("in the baseline's own code, " + "; ".join(hazards)) if hazards else \
        ("work the suite's call does besides launching its kernels (printing, host syncs, Python) counts on the "
         "baseline's side and not on the replay's")
    v.reason = (f"timing: the baseline's own code, timed against itself, measured {v.speedup:.2f}x{where}: the "
                f"two sides are not timed alike here; {why}")
    v.flags += [Flag.TIMING_FAILED, Flag.TIMING_BIASED]
    v.correct, v.speedup, v.stage = False, None, "correct"  # as a timing that failed; its rows stay


def untimeable_start(flags: Sequence[str], reason: str) -> str:
    """Why the timing worker cannot time a task's starting kernel ('' when it could, or when the
    failure was running out of GPU memory: other processes can cause that)."""
    if Flag.TIMING_FAILED not in flags or "out of memory" in reason.lower():
        return ""
    return "its starting kernel cannot be timed here: " + short_reason(reason)


def geomean(values: Iterable[float]) -> float | None:
    """The geometric mean; None for no values. The project's one: verdicts, exports and reports
    all average speedups this way."""
    values = list(values)
    if not values:
        return None
    if any(v <= 0 for v in values):
        raise ValueError("geometric mean of a non-positive value")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def speedup_from_rows(rows: list[TimingRow], peaks: PeakFigures | None,
                      floor: bool = True) -> tuple[list[TimingRow], float | None, list[str]]:
    """The rows with their roofline floor and speedup set, and the geometric mean of the per-shape
    speedups, each time floored at the roofline time (None for no rows). `floor` False: the cost
    model is the suite's estimate, so it only flags, never clamps."""
    flags = []
    out = []
    for r in rows:
        floor_ms = 0.0
        if peaks is not None:
            floor_ms = 1e3 * max(r.bytes / peaks.bandwidth_Bps, r.flops / peaks.flops)
        c, b = (max(r.candidate_ms, floor_ms), max(r.baseline_ms, floor_ms)) if floor else \
            (r.candidate_ms, r.baseline_ms)
        if r.candidate_ms < 0.5 * floor_ms:
            flags.append(Flag.FASTER_THAN_ROOFLINE)
        out.append(replace(r, floor_ms=floor_ms, speedup=b / c if c > 0 else float("inf")))
    speedup = geomean(r.speedup for r in out if r.speedup is not None)
    if speedup is not None and speedup > SUSPICIOUS_SPEEDUP:
        flags.append(Flag.SPEEDUP_REVIEW)
    return out, speedup, sorted(set(flags))


@dataclass(frozen=True)
class UnitStats:
    """An evaluation unit's work in one searching command (a local run has one unit; a cluster one
    per GPU): the per-device throughput the report gives."""
    unit: str  # "local", or host:gpu:pid of a Dask worker (a restarted worker is a new unit)
    device: str  # what its children run on: the GPU's name, or the CPU interpreter
    gpu: bool
    workers: int  # its correctness workers
    evaluations: int
    correctness_busy_s: float
    measuring_s: float  # its GPU's measuring turn held (0 without a GPU)
