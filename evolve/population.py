"""Individuals: each stands for one archived candidate, with the fitness DEAP ranks it by.

Fitness is lexicographic: (correct on the tuning shapes, speedup, how far it got in the cascade),
so any correct kernel beats any broken one, speed decides among correct ones, and among broken
ones a kernel that compiled and ran is a better parent than one that did not parse. Untimed
correct kernels (no GPU) have speedup 0: they tie, and selection among them is random.
"""
from __future__ import annotations

from dataclasses import dataclass

from deap import base, creator

from archives.records import Candidate

STAGE_RANK = {"none": 0, "parse": 1, "compile": 2, "call": 3, "correct": 4, "timed": 5}

if not hasattr(creator, "KernelFitness"):
    creator.create("KernelFitness", base.Fitness, weights=(1.0, 1.0, 1.0))


@dataclass(eq=False)  # identity, not value: DEAP's migration finds individuals with list.index
class Kernel:
    candidate: Candidate

    def __post_init__(self) -> None:
        self.fitness = creator.KernelFitness()
        self.fitness.values = (float(self.correct), float(self.speedup or 0.0) if self.correct else 0.0,
                               float(STAGE_RANK.get(self.stage, 0)))

    @property
    def id(self) -> int:
        return self.candidate.id

    @property
    def code_hash(self) -> str:
        return self.candidate.code_hash

    @property
    def source(self) -> str:
        return self.candidate.source

    @property
    def correct(self) -> bool:  # on the tuning shapes: held-out results never steer the search
        return self.candidate.correct

    @property
    def speedup(self) -> float | None:
        return self.candidate.speedup

    @property
    def stage(self) -> str:
        return self.candidate.stage

    def copy(self) -> Kernel:
        return Kernel(self.candidate)
