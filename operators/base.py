"""What an operator is: a way to make a child kernel from one parent (mutation) or two
(crossover). The engine knows operators only through this interface, so LLM operators and the
LLM-free knob operators are interchangeable and can be mixed at chosen rates."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from archives.records import Candidate
from fitness.common.timing_row import TimingRow


@dataclass(frozen=True)
class Parent:
    """What an operator may see of an archived kernel (the record the archive returns, as a parent
    or a history entry): its tuning results, never the held-out ones, and for repairs the
    reflections of its lineage. A view, not a copy: every field is the candidate's."""

    candidate: Candidate
    reflections: tuple[str, ...] = ()  # of the repairs in its lineage, oldest first

    @property
    def id(self) -> int:
        return self.candidate.id

    @property
    def source(self) -> str:
        return self.candidate.source

    @property
    def speedup(self) -> float | None:  # None: correct but untimed (no GPU), or failed
        return self.candidate.speedup

    @property
    def correct(self) -> bool:  # on the tuning shapes
        return self.candidate.correct

    @property
    def error(self) -> str:
        return self.candidate.error

    @property
    def stage(self) -> str:
        return self.candidate.stage

    @property
    def times(self) -> tuple[TimingRow, ...]:  # per timed tuning shape
        return self.candidate.times

    @property
    def flags(self) -> tuple[str, ...]:  # the evaluator's notes
        return self.candidate.flags

    @property
    def operator(self) -> str:
        return self.candidate.operator

    @property
    def note(self) -> str:  # the strategy (or reflection) that made it
        return self.candidate.note

    @property
    def repairs(self) -> int:
        """Consecutive repairs that led to it (itself included): one reflection each."""
        return len(self.reflections)


@dataclass
class Context:
    """The task as an operator sees it, and the island's history for prompts."""

    task_name: str
    instruction: str = ""
    entry: str = ""
    island: int = 0
    generation: int = 0
    temperature: float | None = None
    history: list[Parent] = field(default_factory=list)  # earlier attempts, sorted ascending by speedup
    reference: str = ""  # the reference's source, when it has one: what generation retrieves by
    # per timed shape (operators.shape_facts.row_key): the run's median baseline ms, which the
    # history's speedups are taken against
    baselines: dict = field(default_factory=dict)
    setting: str = "optimize"  # or "instruction": the LLM sees no reference or starting kernel code
    entry_form: str = ""  # what the module must define, in words ("the class `X`"); '' : from `entry`
    interface: str = ""  # instruction setting: signatures, dtypes and sizes, never a body


@dataclass
class Child:
    source: str
    operator: str  # the name stored in the archive
    note: str = ""  # what changed, in a few words
    llm_calls: list = field(default_factory=list)  # ids of the archived calls that made it


class Pending(Exception):
    """The operator's answer is not here yet (an LLM exchange round is waiting for it)."""


class Exhausted(Exception):
    """The operator can make nothing more in this run (budget spent, endpoint refused us)."""


class Unusable(Exhausted):
    """The model or its endpoint cannot serve the run (it refused us, or never answered with code):
    the user's to fix before the run can go on, unlike a budget they set."""


class Operator:
    """Subclasses set `name` and `arity` (1 = mutation, 2 = crossover) and implement `propose`.
    `propose` returns None when it has nothing to offer for these parents (e.g. no knobs).
    A `repairs` operator is not picked at random: the search hands it the island's children of
    the last generation that failed. A `fresh` operator ignores its parents."""

    name = "operator"
    arity = 1
    repairs = False
    fresh = False  # writes a kernel from the task alone: the only kind an island with no kernel can use

    def propose(self, parents: list[Parent], context: Context, rng: random.Random) -> Child | None:
        raise NotImplementedError


@dataclass
class WeightedOperator:
    operator: Operator
    rate: float  # relative chance of being picked for a child


def pick(operators: list[WeightedOperator], rng: random.Random) -> Operator:
    total = sum(w.rate for w in operators)
    x = rng.random() * total
    for w in operators:
        x -= w.rate
        if x < 0:
            return w.operator
    return operators[-1].operator
