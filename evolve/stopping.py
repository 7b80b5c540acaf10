"""When a task's search has stopped paying for its calls: its best kernel runs near the roofline on
every timed shape (`--roofline-stop SHARE`), or the best speedup has not grown for `--patience`
generations. Both read the archive's rows alone, so a resumed run decides the same way."""
from __future__ import annotations

from collections.abc import Sequence

from archives.metrics import best_kernel
from archives.records import Candidate
from operators.base import WeightedOperator
from operators.shape_facts import roofline_share


def stalled(rows: Sequence[Candidate], done: int, patience: int) -> bool:
    """True when the best passed speedup was last raised `patience` or more generations before
    generation `done` (the last one finished)."""
    best, improved = 0.0, 0
    for c in sorted(rows, key=lambda c: c.generation):
        ev = c.evaluation
        if c.generation <= done and ev is not None and ev.passed and ev.speedup and ev.speedup > best:
            best, improved = ev.speedup, c.generation
    return done - improved >= patience


def at_roofline(rows: Sequence[Candidate], share: float) -> bool:
    """True when the fastest passed kernel reaches `share` of the roofline on every timed shape
    (never without a cost model: no roofline to be near)."""
    best = best_kernel(rows, need_heldout=True)  # the export's pick; an untimed one has no times
    shares = [roofline_share(t) for t in best.times] if best else []
    return bool(shares) and all(s is not None and s >= share for s in shares)


def saved_calls(remaining: int, islands: int, population: int, operators: Sequence[WeightedOperator]) -> int:
    """LLM calls an early stop spares, estimated: the generations left x islands x population,
    times the share of children LLM operators make (at least one call each)."""
    total = sum(w.rate for w in operators)
    llm = sum(w.rate for w in operators if hasattr(w.operator, "client"))
    return round(max(0, remaining) * islands * population * (llm / total if total else 0.0))
