"""The messages between the engine and its children, as typed records (issue 43).

Each request op is a frozen dataclass: its fields documented, `op` a class constant, `to_wire()`
the very dict the engine always sent (fitness.process.protocol moves it: JSON and tensor bytes,
never pickle), and `parse_request` the child's way back from that dict to the record. A reply is
read by the engine with `Reply.from_wire(d, payload type)`: the envelope every reply has (error,
stage, fatal, nonce, phase_ms) and the op's own payload, each field checked for its type. A
child may run untrusted code, so a reply with a field of the wrong type is never used as it
came: it reads as a failure that names the field (fail closed).

Here in fitness/common, not fitness/process, because the child-side readers live on every side
of the layout: fitness/clean (the timing requests), fitness/common (the reference child's) and
fitness/process; and the engine sends them. It imports nothing of a side. The payloads and the
envelope are in fitness.common.replies, the reading of fields by type in fitness.common.records.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Self, cast, get_args, get_origin

from fitness.common.records import BadMessage as BadMessage  # re-exported: what a reader catches
from fitness.common.records import Record, optional
from fitness.common.replies import (
    CaseRan,
    Checked,
    Nothing,
    Opened,
    Oracled,
    P,
    PeakFigures,
    Prepared,
    RefChecked,
    Replayed,
    ScriptRan,
    SetsMade,
    Trialled,
    Warmed,
)
from fitness.common.replies import Reply as Reply  # re-exported: the engine reads replies with it

TaskSpec = dict  # how a child finds a task: {"suite", "name", "path"} (fitness.engine.evaluator.task_spec)
Case = dict  # one case: split, kind or shape, dtype, seed: the suite's and the judge's own keys
Slot = int | str  # a prepared timing side: the replay's by shape index, the baseline's by epoch ("epoch3")
ENVELOPE = "nonce"  # the one key of a request besides its fields: echoed in the reply (fitness.engine.forked_child)


# -- requests (engine -> child) -------------------------------------------------------------
class Request(Record, Generic[P]):
    """A request; its reply's payload is P (its base names it: Request[Warmed])."""

    op: ClassVar[str]

    def to_wire(self) -> dict:
        return {"op": self.op, **super().to_wire()}

    @classmethod
    def from_wire(cls, d: Any) -> Self:
        if isinstance(d, dict):
            unknown = sorted(str(k) for k in d if k not in (*_names(cls), "op", ENVELOPE))
            if unknown:  # a field the child would not read: a sender out of step with this module
                raise BadMessage(f"unknown field(s) {', '.join(unknown)}")
        return super().from_wire(d)

    @classmethod
    def answer(cls) -> type[P]:
        """The payload class of this op's reply: the P of its base Request[P]."""
        for base in getattr(cls, "__orig_bases__", ()):
            if get_origin(base) is Request:
                return cast(type[P], get_args(base)[0])
        raise TypeError(f"{cls.__name__} names no reply payload")


@dataclass(frozen=True, kw_only=True)
class Import(Request[Nothing]):
    """Import a candidate's module in its child; the reply's stage is "call" when it defines the entry."""

    op: ClassVar[str] = "import"
    source: str
    task: TaskSpec


@dataclass(frozen=True, kw_only=True)
class RunCase(Request[CaseRan]):
    """One correctness case of the imported candidate, on inputs drawn from the case's seed."""

    op: ClassVar[str] = "case"
    task: TaskSpec
    case: Case


@dataclass(frozen=True, kw_only=True)
class ReplayItem(Record):
    case: Case  # with the fresh seed the replay draws its inputs from
    trace: Any  # the recorded call, as the candidate's child sent it (checked where it is replayed)


@dataclass(frozen=True, kw_only=True)
class Replay(Request[Replayed]):
    """Recorded calls replayed alone in a clean child that never imports the candidate."""

    op: ClassVar[str] = "replay"
    task: TaskSpec
    items: tuple[ReplayItem, ...]
    source: str | None  # the candidate's source: its kernels built from it (interpreted, or compiled on a GPU)


@dataclass(frozen=True, kw_only=True)
class Script(Request[ScriptRan]):
    """The suite's reference of a script task on a list of cases, in a child that loads nothing else."""

    op: ClassVar[str] = "script"
    reference: bool = True  # always: a candidate's script cases go as `case`
    task: TaskSpec
    cases: tuple[Case, ...]
    count: bool  # also count the suite's benchmark inputs and their sizes
    guard: bool = False  # the same draws again inside guard bands (fitness.clean.guard_bands)
    keep: bool = True  # with guard: the plain results stay in the reply

    def to_wire(self) -> dict:
        wire = super().to_wire()
        if not self.guard:  # the two go together, or neither (as script_eval always sent them)
            del wire["guard"], wire["keep"]
        return wire


@dataclass(frozen=True, kw_only=True)
class TimePrepare(Request[Prepared]):
    """A timed shape's side prepared under `slot` before the measuring turn: the replayed
    `trace`, or (no trace) the baseline: the suite's reference or `baseline_source`."""

    op: ClassVar[str] = "time_prepare"
    task: TaskSpec
    case: Case
    seeds: tuple[int, ...]  # the epoch's draws
    slot: Slot
    trace: Any = optional(None)
    source: str | None = optional(None)  # with a trace: the candidate's source, its kernels built from it here
    baseline_source: str | None = None
    keep_share: float | None = optional(None)  # the baseline child's share of the GPU's memory for kept sides

    def to_wire(self) -> dict:
        wire = super().to_wire()
        if self.baseline_source is None and self.keep_share is None:  # the baseline's names it, None or not
            del wire["baseline_source"]
        return wire


@dataclass(frozen=True, kw_only=True)
class TimeOpen(Request[Opened]):
    """The measuring turn opens a prepared slot."""

    op: ClassVar[str] = "time_open"
    slot: Slot


@dataclass(frozen=True, kw_only=True)
class TimeSets(Request[SetsMade]):
    """A prepared slot's input sets and, with `graph`, its captured region."""

    op: ClassVar[str] = "time_sets"
    slot: Slot
    n_sets: int
    graph: bool = True


@dataclass(frozen=True, kw_only=True)
class TrialCheck(Record):
    rep: int  # the trial, of this request's, after which the outputs are kept
    picks: tuple[int, ...]  # the sets whose outputs are kept


@dataclass(frozen=True, kw_only=True)
class Trial(Request[Trialled]):
    """`reps` timed trials on the open side, trial j on rotation rots[j] (or fresh draws of key fresh[j])."""

    op: ClassVar[str] = "trial"
    k: int  # the side's first trial of this request
    passes: int = 1  # passes over the input sets per region
    reps: int
    warm: bool = optional(False)  # the turn's untimed first request (its times unread)
    rots: tuple[int, ...]
    fresh: tuple[int | None, ...] | None = optional(None)
    check: TrialCheck | None = optional(None)


@dataclass(frozen=True, kw_only=True)
class TimeCheck(Request[Checked]):
    """The outputs the checked trial kept; `drop`: the slot is done with."""

    op: ClassVar[str] = "time_check"
    slot: Slot
    drop: bool = optional(True)


@dataclass(frozen=True, kw_only=True)
class TimeOracle(Request[Oracled]):
    """The baseline's outputs of the picked sets on rotation `rot`."""

    op: ClassVar[str] = "time_oracle"
    picks: tuple[int, ...]
    rot: int
    slot: Slot


@dataclass(frozen=True, kw_only=True)
class Peaks(Request[PeakFigures]):
    """The device's measured ceilings, in a clean child."""

    op: ClassVar[str] = "peaks"


@dataclass(frozen=True, kw_only=True)
class Warm(Request[Warmed]):
    """A spare child starts its device before its conversation is handed out."""

    op: ClassVar[str] = "warm"


@dataclass(frozen=True, kw_only=True)
class RefPrefetch(Request[Nothing]):
    """A reference child starts computing a case's float64 reference (answered at once)."""

    op: ClassVar[str] = "ref_prefetch"
    task: TaskSpec
    case: Case
    cache_bytes: int  # its cache's bound, on its first request


@dataclass(frozen=True, kw_only=True)
class RefCheck(Request[RefChecked]):
    """What is wrong with a candidate's outputs of a case, against the reference child's reference."""

    op: ClassVar[str] = "ref_check"
    outputs: Any  # as the candidate's child sent them: compared, never trusted
    task: TaskSpec
    case: Case
    cache_bytes: int


def _names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cast(Any, cls))]


REQUESTS: dict[str, type[Request]] = {r.op: r for r in (
    Import, RunCase, Replay, Script, TimePrepare, TimeOpen, TimeSets, Trial, TimeCheck, TimeOracle, Peaks, Warm,
    RefPrefetch, RefCheck)}


def parse_request(d: Any) -> Request:
    """The typed request of a wire dict (the child's side); BadMessage says what is wrong."""
    op = d.get("op") if isinstance(d, dict) else None
    kind = REQUESTS.get(op) if isinstance(op, str) else None
    if kind is None:
        raise BadMessage(f"unknown op {op!r}")
    try:
        return kind.from_wire(d)
    except BadMessage as e:
        raise BadMessage(f"malformed {op} request: {e}") from None


# -- the child's greeting ----------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Ready(Record):
    """A child's first message: who it is, before any request (fitness.engine.forked_child.hello)."""

    op: ClassVar[str] = "ready"
    pid: int  # as the engine's namespace numbers it (fitness.process.isolation.outer_pid)
    device: str
    how: str  # how its process is isolated, for the verdict

    def to_wire(self) -> dict:
        return {"op": self.op, **super().to_wire()}

    @classmethod
    def from_wire(cls, d: Any) -> Self:
        if not isinstance(d, dict) or d.get("op") != cls.op:
            raise BadMessage("not a child's greeting")
        return super().from_wire(d)


