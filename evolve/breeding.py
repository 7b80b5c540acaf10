"""How one island makes its children for one generation, without threads or the archive.

`draw_jobs` draws operators, parents and the repair allotment from the island's random stream;
`breed` runs the drawing rounds: it draws jobs for the places still open, hands them to
`propose` (which the search runs in threads), and counts what came back. Exact resume rests here:
the stream is drawn from its start again after a stop, and a child that was made before the stop
(its hash in `made_before`, already in the archive) counts as made without being kept twice, so a
resumed generation draws and keeps exactly what an unbroken one would have.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

from archives.codehash import code_hash
from evolve.policies import Selection
from evolve.population import Kernel
from operators.base import Child, Operator, WeightedOperator, pick

ATTEMPTS_PER_PLACE = 5  # draws per place before a generation gives up on filling it (duplicates, None)


class Awaiting:
    """What `propose` returns for a job whose operator's answer is not here yet (an LLM exchange
    round waits for it): its place stays open for the next command."""


AWAITING = Awaiting()
Proposal = Child | Awaiting | None  # None: the operator had nothing to offer


@dataclass(frozen=True)
class Job:
    operator: Operator
    parents: tuple[Kernel, ...]
    seed: int  # the job's own random stream, drawn from the island's

    def rng(self) -> random.Random:
        return random.Random(self.seed)


@dataclass
class Draw:
    """One island's drawing for one generation: its stream, and the failures of its previous
    generation that a repair operator gets first (oldest first), up to `repair_cap` of them."""

    rng: random.Random
    failed: list[Kernel] = field(default_factory=list)
    repair_cap: int = 0
    attempts: int = 0
    repairs: int = 0


def draw_jobs(draw: Draw, count: int, operators: Sequence[WeightedOperator], population: list[Kernel],
              selection: Selection, mutations_only: bool = False) -> list[Job]:
    """Up to `count` jobs, in order from the island's stream. A repair takes the next failure
    while any is left and the allotment lasts; the other places get an operator picked at its
    rate (mutations only in generation 0) and parents chosen by `selection`."""
    repairer = None if mutations_only else next((w.operator for w in operators if w.operator.repairs), None)
    drawable = [w for w in operators if not w.operator.repairs and (w.operator.arity == 1 or not mutations_only)]
    jobs = []
    for _ in range(count):
        draw.attempts += 1
        if repairer is not None and draw.failed and draw.repairs < draw.repair_cap:
            draw.repairs += 1
            op, parents = repairer, [draw.failed.pop(0)]
        else:
            if not drawable:
                break
            op = pick(drawable, draw.rng)
            if not population:  # an island with no kernel yet: a fresh operator, which takes none
                parents = []
            elif len(population) > 1:
                parents = selection.parents(population, op.arity, draw.rng)
            else:
                parents = [population[0]] * op.arity
        jobs.append(Job(op, tuple(parents), draw.rng.getrandbits(64)))
    return jobs


@dataclass(frozen=True)
class Brood:
    """What one island's generation is made from, and where its children go."""

    wanted: int  # children in all, those made before a stop included
    made_before: tuple[str, ...]  # code hashes of the children already in the archive
    population: list[Kernel]
    selection: Selection
    mutations_only: bool = False  # generation 0: mutants of the starting kernel, or fresh kernels


def breed(brood: Brood, draw: Draw, operators: Callable[[], Sequence[WeightedOperator]],
          propose: Callable[[list[Job]], list[Proposal] | None], keep: Callable[[Job, Child, str], bool],
          stopped: Callable[[], bool]) -> int:
    """Draws rounds of jobs until `brood.wanted` places are filled (or waiting for an answer), or
    the attempts run out; returns how many new children `keep` accepted. `propose` returns None
    when the run stopped before the children could be added; `keep(job, child, hash)` adds a
    child and says False for a kernel this run already has."""
    before = set(brood.made_before)
    have, replayed, made, waiting = len(brood.made_before), 0, 0, 0
    while (replayed + made + waiting < brood.wanted and made < brood.wanted - have
           and draw.attempts < ATTEMPTS_PER_PLACE * brood.wanted and not stopped()):
        jobs = draw_jobs(draw, brood.wanted - replayed - made - waiting, operators(), brood.population,
                         brood.selection, brood.mutations_only)
        if not jobs:
            break
        outcomes = propose(jobs)
        if outcomes is None:
            break
        for job, child in zip(jobs, outcomes):
            if stopped():
                break
            if isinstance(child, Awaiting):
                waiting += 1
            elif child is not None:
                h = code_hash(child.source)
                if h in before:  # made by this draw before the stop: already in the archive
                    before.discard(h)
                    replayed += 1
                elif keep(job, child, h):
                    made += 1
    return made
