"""Individuals and the DEAP policies that act on islands: parent selection, elitist (mu + lambda)
replacement and ring migration.

An individual stands for one archived candidate. Its fitness is lexicographic: (correct on the
tuning shapes, speedup, how far it got in the cascade), so any correct kernel beats any broken
one, speed decides among correct ones, and among broken ones a kernel that compiled and ran
is a better parent than one that did not parse. Untimed correct kernels (no GPU) have speedup 0:
they tie, and selection among them is random.

DEAP's operators draw from the global `random` module. Islands of many tasks run in threads, so
each DEAP call happens under one lock with `random` seeded from the island's own generator:
a run is reproducible for a given --seed, whatever the thread timing.
"""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass

from deap import base, creator, tools

STAGE_RANK = {"none": 0, "parse": 1, "compile": 2, "call": 3, "correct": 4, "timed": 5}

if not hasattr(creator, "KernelFitness"):
    creator.create("KernelFitness", base.Fitness, weights=(1.0, 1.0, 1.0))


@dataclass(eq=False)  # identity, not value: DEAP's migration finds individuals with list.index
class Kernel:
    id: int
    code_hash: str
    source: str
    correct: bool = False  # on the tuning shapes: held-out results never steer the search
    speedup: float | None = None
    stage: str = "none"
    error: str = ""

    def __post_init__(self):
        self.fitness = creator.KernelFitness()
        self.fitness.values = (float(self.correct), float(self.speedup or 0.0) if self.correct else 0.0,
                               float(STAGE_RANK.get(self.stage, 0)))

    def copy(self) -> "Kernel":
        return Kernel(self.id, self.code_hash, self.source, self.correct, self.speedup, self.stage, self.error)


def kernel_from_row(row: dict) -> Kernel:
    return Kernel(row["id"], row["code_hash"], row["source"], bool(row.get("correct")), row.get("speedup"),
                  row.get("stage") or "none", row.get("error") or "")


_DEAP_RANDOM = threading.Lock()


def _with_rng(rng: random.Random, fn, *args, **kwargs):
    with _DEAP_RANDOM:
        saved = random.getstate()
        random.seed(rng.getrandbits(64))
        try:
            return fn(*args, **kwargs)
        finally:
            random.setstate(saved)


class Policy:
    """The swappable selection / replacement / migration rules, built on DEAP's tools."""

    def __init__(self, tournament_size: int = 3, migrants: int = 1):
        self.toolbox = base.Toolbox()
        self.toolbox.register("select", tools.selTournament, tournsize=tournament_size)
        self.toolbox.register("survive", tools.selBest)
        self.toolbox.register("emigrate", tools.selBest)
        self.toolbox.register("displace", tools.selWorst)
        self.migrants = migrants

    def parents(self, population: list[Kernel], k: int, rng: random.Random) -> list[Kernel]:
        return _with_rng(rng, self.toolbox.select, population, k)

    def replace(self, population: list[Kernel], children: list[Kernel], mu: int) -> list[Kernel]:
        """(mu + lambda): the best mu of parents and children; a kernel already present (same
        normalized source) counts once."""
        seen, pool = set(), []
        for k in population + children:
            if k.code_hash not in seen:
                seen.add(k.code_hash)
                pool.append(k)
        # selBest sorts stably: on equal fitness the older individual stays
        return list(self.toolbox.survive(pool, min(mu, len(pool))))

    def migrate(self, islands: list[list[Kernel]], rng: random.Random):
        """The best `migrants` of island i replace the worst of island i+1, around the ring. A
        migrant the next island already holds (same normalized source) stays home: a copy would
        only take the place of a distinct kernel (the starting kernel sits on every island)."""
        if len(islands) < 2:
            return
        k = min(self.migrants, *(len(p) for p in islands))
        if k < 1:
            return
        # everyone chosen before anyone moves, as on a ring all islands send at once
        leaving = [[ind.copy() for ind in _with_rng(rng, self.toolbox.emigrate, pop, k)] for pop in islands]
        for i, movers in enumerate(leaving):
            dest = islands[(i + 1) % len(islands)]
            held = {ind.code_hash for ind in dest}
            movers = [m for m in movers if m.code_hash not in held]
            for mover, worst in zip(movers, _with_rng(rng, self.toolbox.displace, dest, len(movers))):
                dest[next(j for j, ind in enumerate(dest) if ind is worst)] = mover
