"""The rules that act on islands, as three small protocols: which parents breed (selection),
who survives a generation (replacement), who moves between islands (migration). Each receives
plain lists of kernels and the island's random stream, never the archive. The defaults are
DEAP's tools: tournament selection, elitist (mu + lambda) replacement and ring migration.

DEAP's operators draw from the global `random` module. Islands of many tasks run in threads, so
each DEAP call happens under one lock with `random` seeded from the island's own generator:
a run is reproducible for a given --seed, whatever the thread timing.
"""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, TypeVar

from deap import tools

from evolve.population import Kernel

T = TypeVar("T")
_DEAP_RANDOM = threading.Lock()


def _with_rng(rng: random.Random, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    with _DEAP_RANDOM:
        saved = random.getstate()
        random.seed(rng.getrandbits(64))
        try:
            return fn(*args, **kwargs)
        finally:
            random.setstate(saved)


class Selection(Protocol):
    def parents(self, population: list[Kernel], k: int, rng: random.Random) -> list[Kernel]: ...


class Replacement(Protocol):
    def survivors(self, population: list[Kernel], children: list[Kernel], mu: int) -> list[Kernel]: ...


class Migration(Protocol):
    def migrate(self, islands: list[list[Kernel]], rng: random.Random) -> None: ...


@dataclass(frozen=True)
class Tournament:
    size: int = 3

    def parents(self, population: list[Kernel], k: int, rng: random.Random) -> list[Kernel]:
        return _with_rng(rng, tools.selTournament, population, k, tournsize=self.size)


@dataclass(frozen=True)
class Elitist:
    """(mu + lambda): the best mu of parents and children; a kernel already present (same
    normalized source) counts once."""

    def survivors(self, population: list[Kernel], children: list[Kernel], mu: int) -> list[Kernel]:
        seen, pool = set(), []
        for k in population + children:
            if k.code_hash not in seen:
                seen.add(k.code_hash)
                pool.append(k)
        # selBest sorts stably: on equal fitness the older individual stays
        return list(tools.selBest(pool, min(mu, len(pool))))


@dataclass(frozen=True)
class Ring:
    """The best `migrants` of island i replace the worst of island i+1, around the ring. A
    migrant the next island already holds (same normalized source) stays home: a copy would only
    take the place of a distinct kernel (the starting kernel sits on every island)."""

    migrants: int = 1

    def migrate(self, islands: list[list[Kernel]], rng: random.Random) -> None:
        if len(islands) < 2:
            return
        k = min(self.migrants, *(len(p) for p in islands))
        if k < 1:
            return
        # everyone chosen before anyone moves, as on a ring all islands send at once
        leaving = [[ind.copy() for ind in _with_rng(rng, tools.selBest, pop, k)] for pop in islands]
        for i, movers in enumerate(leaving):
            dest = islands[(i + 1) % len(islands)]
            held = {ind.code_hash for ind in dest}
            movers = [m for m in movers if m.code_hash not in held]
            for mover, worst in zip(movers, _with_rng(rng, tools.selWorst, dest, len(movers))):
                dest[next(j for j, ind in enumerate(dest) if ind is worst)] = mover


@dataclass(frozen=True)
class Policy:
    """The three rules a search uses; any of them can be swapped for another implementation."""

    selection: Selection = field(default_factory=Tournament)
    replacement: Replacement = field(default_factory=Elitist)
    migration: Migration = field(default_factory=Ring)
