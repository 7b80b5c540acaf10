"""What an operator is: a way to make a child kernel from one parent (mutation) or two
(crossover). The engine knows operators only through this interface, so LLM operators and the
LLM-free knob operators are interchangeable and can be mixed at chosen rates."""
from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Parent:
    """What an operator may see of a parent: never the held-out results."""

    id: int
    source: str
    speedup: float | None = None  # None: correct but untimed (no GPU), or failed
    correct: bool = False  # on the tuning shapes
    error: str = ""


@dataclass
class Context:
    """The task as an operator sees it, and the island's history for prompts."""

    task_name: str
    instruction: str = ""
    entry: str = ""
    island: int = 0
    generation: int = 0
    temperature: float | None = None
    history: list = field(default_factory=list)  # earlier attempts, e.g. for OPRO-style prompts


@dataclass
class Child:
    source: str
    operator: str  # the name stored in the archive
    note: str = ""  # what changed, in a few words


class Operator:
    """Subclasses set `name` and `arity` (1 = mutation, 2 = crossover) and implement `propose`.
    `propose` returns None when it has nothing to offer for these parents (e.g. no knobs)."""

    name = "operator"
    arity = 1

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
