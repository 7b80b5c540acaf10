"""What an operator is: a way to make a child kernel from one parent (mutation) or two
(crossover). The engine knows operators only through this interface, so LLM operators and the
LLM-free knob operators are interchangeable and can be mixed at chosen rates."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from fitness.common.timing_row import TimingRow


@dataclass
class Parent:
    """What an operator may see of a parent: never the held-out results."""

    id: int
    source: str
    speedup: float | None = None  # None: correct but untimed (no GPU), or failed
    correct: bool = False  # on the tuning shapes
    error: str = ""
    # what LLM prompts show; the knob operators ignore these
    stage: str = "none"
    times: tuple[TimingRow, ...] = ()  # per timed tuning shape: candidate/baseline ms
    flags: list = field(default_factory=list)  # the evaluator's notes
    operator: str = ""
    note: str = ""  # the strategy (or reflection) that made it
    reflections: list = field(default_factory=list)  # of the repairs in its lineage, oldest first
    repairs: int = 0  # consecutive repairs that led to it (itself included)


@dataclass
class Context:
    """The task as an operator sees it, and the island's history for prompts."""

    task_name: str
    instruction: str = ""
    entry: str = ""
    island: int = 0
    generation: int = 0
    temperature: float | None = None
    history: list = field(default_factory=list)  # earlier attempts (Parent), sorted ascending by speedup
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
