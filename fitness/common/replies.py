"""What the engine reads of a child's reply (fitness.common.messages): the envelope every reply
has and each op's payload, every field checked for its type. A child may run untrusted code, so
a reply with a field of the wrong type is never used as it came: it reads as a failure that names
the field (fail closed)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

from fitness.common.records import BadMessage, Record


class Payload(Record):
    """An op's own fields of a reply; keys it does not name are left unread."""


P = TypeVar("P", bound=Payload)


@dataclass(frozen=True)
class Nothing(Payload):
    """A reply of no fields of its own (ref_prefetch; import, whose `stage` says how far it got)."""


@dataclass(frozen=True, kw_only=True)
class CaseRan(Payload):
    """One case's call in the candidate's child: claims, checked by the engine and the replay."""

    outputs: tuple[torch.Tensor, ...] | None = None  # a function task's outputs, copied to the host
    trace: dict | None = None  # what it launched (fitness.candidate.recorder), read by fitness.clean.trace_check
    tree: Any = None  # a script task's result (suites.script.to_wire)
    torch_elements: int = 0  # elements torch computed outside Triton kernels (script tasks)
    launches: int = 0  # the module's own kernel launches (script tasks)


@dataclass(frozen=True, kw_only=True)
class ReplayResult(Record):
    """One recorded call replayed in a clean child: its outputs, or why not."""

    outputs: tuple[torch.Tensor, ...] = ()
    torch_elements: int = 0  # elements the replay's torch primitives computed
    torch_ops: dict[str, int] = field(default_factory=dict)  # those elements by op
    stale_reads: tuple[str, ...] = ()  # host reads (.item()) whose replayed value differs from the recorded one
    error: str | None = None
    fatal: bool = False


@dataclass(frozen=True, kw_only=True)
class Replayed(Payload):
    results: tuple[ReplayResult, ...]  # one per item sent, in order


@dataclass(frozen=True, kw_only=True)
class ScriptRan(Payload):
    """The suite's reference run on a list of cases (fitness.process.child_script)."""

    results: tuple[dict, ...]  # per case: {"tree", "torch_elements", "launches"} ("tree" gone without keep)
    perf_count: int = 0  # benchmark inputs the suite has (with count)
    perf_bytes: tuple[int, ...] | None = None  # their sizes in bytes, where known
    perf_error: str | None = None  # why they could not be counted
    guard: tuple[dict, ...] = ()  # per case (with guard): {}, a guard-band Finding's wire form, or {"unchecked"}


@dataclass(frozen=True, kw_only=True)
class Prepared(Payload):
    """A timed shape's side ready (fitness.clean.child_timing.PreparedSides.prepare): its calibration."""

    t_one_ms: float  # one call's time
    in_bytes: int  # one draw's bytes
    l2_bytes: int
    warm_ms: float = 0.0  # the warm-up's wall time
    cost: tuple[float, float] | None = None  # (bytes, flops) by the suite's cost model (the baseline's side)
    describe: str = ""  # the inputs, as the prompt names them


@dataclass(frozen=True, kw_only=True)
class Opened(Payload):
    """The measuring turn's side: the prepared slot, or `missing` (dropped, or never prepared)."""

    missing: bool = False
    cal: Prepared | None = None
    method: str = ""  # "cuda-graph" or "eager"
    n_sets: int = 0
    n_draws: int = 0


@dataclass(frozen=True, kw_only=True)
class SetsMade(Payload):
    method: str  # how its regions run: "cuda-graph" or "eager"
    n_draws: int


@dataclass(frozen=True, kw_only=True)
class Trialled(Payload):
    ms: tuple[float, ...]  # per trial, ms per input set


@dataclass(frozen=True, kw_only=True)
class Checked(Payload):
    outputs: tuple[Any, ...]  # the checked trial's kept outputs (suites.script.to_wire)


@dataclass(frozen=True, kw_only=True)
class Oracled(Payload):
    outputs: tuple[tuple[Any, ...], ...]  # per picked set: [under 0x00, under 0xFF]
    n_draws: int


@dataclass(frozen=True, kw_only=True)
class PeakFigures(Payload):
    bandwidth_Bps: float  # device-to-device copy
    flops: float  # bf16 matmul
    l2_bytes: int
    device: str


@dataclass(frozen=True, kw_only=True)
class Warmed(Payload):
    device: str
    nice: int


@dataclass(frozen=True, kw_only=True)
class RefChecked(Payload):
    problem: str  # '' or what is wrong with the outputs
    ms: dict[str, float] = field(default_factory=dict)  # the reference child's time, by step



# -- the envelope of every reply ----------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class _Envelope(Payload):
    error: str | None = None
    stage: str | None = None  # how far a candidate got: "parse", "compile", "call"
    fatal: bool = False  # a CUDA fault: the child can serve nothing more
    nonce: str | None = None
    phase_ms: dict[str, float] = field(default_factory=dict)
    gpu_peak: int = 0  # the bytes the child's allocator reserved at most, so far (fitness.engine.gpu_memory)
    gpu_now: int = 0  # the bytes it holds reserved now


@dataclass(frozen=True)
class Reply(Generic[P]):
    """A child's answer as the engine reads it: the envelope every reply has and the op's payload
    (None where the child reported an error). A reply whose fields have the wrong type reads as
    `malformed`: an error that names the field, and fatal (nothing more is asked of that child)."""

    payload: P | None
    error: str | None = None
    stage: str | None = None
    fatal: bool = False
    nonce: str | None = None
    phase_ms: dict[str, float] = field(default_factory=dict)
    malformed: bool = False
    gpu_peak: int = 0
    gpu_now: int = 0

    @staticmethod
    def from_wire(d: Any, answer: type[P]) -> Reply[P]:
        try:
            env = _Envelope.from_wire(d)
            payload = None if env.error else answer.from_wire(d)
        except BadMessage as e:
            return Reply[P](None, error=f"the child's reply is malformed: {e}", fatal=True, malformed=True)
        return Reply(payload, env.error, env.stage, env.fatal, env.nonce, env.phase_ms, gpu_peak=env.gpu_peak,
                     gpu_now=env.gpu_now)

    @staticmethod
    def failed(error: str) -> Reply[Any]:
        """A reply that never came (the child died, or none could be had), as a failed one."""
        return Reply(None, error=error)
