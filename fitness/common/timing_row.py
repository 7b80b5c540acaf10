"""One timed shape of a verdict: what the measuring turn found (fitness.engine.trials.timed_row),
its roofline floor and speedup (fitness.engine.verdict.speedup_from_rows), as the archive stores
it (evaluations.times, one JSON object a shape) and as the report and the prompts read it.

In fitness/common because both sides of the archive read it: the engine writes rows, archives/
and operators/ read them, and neither may import the other's code.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

# keys a row of the archive may lack: added after the first archives were written (an older row
# reads as "not recorded"), or set only once the roofline is known (speedup_from_rows)
_LATER = ("baseline_kept", "describe", "phase_ms", "floor_ms", "speedup")


@dataclass(frozen=True)
class TimingRow:
    """A shape's times, the candidate's (its kernels replayed) against the baseline's. The field
    order is the archive's key order: `to_dict` writes the same JSON the dict rows did."""

    shape: dict[str, Any]  # the case's sizes ({"N": 1024}); a script task's {"perf": index}
    dtype: str  # the case's dtype ("given": the script's own inputs)
    candidate_ms: float  # median over the candidate's trials, per input set
    baseline_ms: float  # median over the baseline's trials (its kept ones where baseline_kept)
    candidate_spread: float  # interquartile range over median of the candidate's trials
    baseline_spread: float
    method: str  # how a call was timed ("graph", "eager"), the same for both sides
    input_sets: int  # input sets each trial ran over (L2 flushed between them)
    trials: int  # the candidate's trials
    baseline_trials: int
    baseline_kept: bool = False  # the baseline's median is over its kept trials of the epoch
    bytes: float = 0.0  # the suite's cost model: bytes moved by one call (0: none)
    flops: float = 0.0  # and its FLOPs (0: none)
    describe: str = ""  # the inputs behind a script task's shape, for prompts ('' for builtin tasks)
    phase_ms: dict[str, float] = field(default_factory=dict)  # the sides' warm-up ms
    # None until speedup_from_rows: the row then lacks these keys, as the dict row did
    floor_ms: float | None = None  # the roofline time at the measured peaks (0.0: no peaks)
    speedup: float | None = None  # baseline over candidate, both floored at floor_ms where clamped

    def to_dict(self) -> dict[str, Any]:
        """The row as the archive's JSON holds it: every key in field order, floor_ms and speedup
        left out while None."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        for k in ("floor_ms", "speedup"):
            if d[k] is None:
                del d[k]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TimingRow:
        """A row read back (the archive's JSON); KeyError when one a row always had is missing,
        defaults where an older archive's row lacks a later key."""
        names = [f.name for f in fields(cls)]
        missing = [k for k in names if k not in d and k not in _LATER]
        if missing:
            raise KeyError(f"a timing row lacks {', '.join(missing)}")
        return cls(**{k: d[k] for k in names if k in d})


def rows_from_dicts(items: list[Any]) -> tuple[TimingRow, ...]:
    """The rows of an evaluation's times as parsed from the archive's JSON; one that lacks a measured
    field (timed_row always wrote them) is left out rather than shown with made-up times."""
    out = []
    for d in items:
        try:
            out.append(TimingRow.from_dict(d))
        except (KeyError, TypeError):
            continue
    return tuple(out)
