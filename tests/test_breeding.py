"""The breeding step: jobs drawn from the island's stream alone, and exact resume after a stop."""
import random

import pytest

from archives.codehash import code_hash
from archives.records import Candidate, Evaluation
from evolve.breeding import Brood, Draw, breed, draw_jobs
from evolve.policies import Tournament
from evolve.population import Kernel
from operators.base import Child, Operator, WeightedOperator


class Named(Operator):
    def __init__(self, name: str, arity: int = 1, repairs: bool = False) -> None:
        self.name, self.arity, self.repairs = name, arity, repairs


MUTATE, CROSS, REPAIR = Named("mutate"), Named("cross", 2), Named("repair", repairs=True)
OPERATORS = [WeightedOperator(MUTATE, 2.0), WeightedOperator(CROSS, 1.0), WeightedOperator(REPAIR, 1.0)]
WANTED = 6


def kernel(i: int, speedup: float | None, correct: bool = True) -> Kernel:
    evaluation = Evaluation(i, "timed" if correct else "call", correct, correct, correct, speedup, "", "")
    return Kernel(Candidate(i, 1, "t", 0, 0, f"src{i}", f"h{i}", (), "op", "", evaluation=evaluation))


POPULATION = [kernel(1, 1.0), kernel(2, 1.4), kernel(3, 0.8), kernel(4, 2.0)]
FAILED = [kernel(5, None, correct=False), kernel(6, None, correct=False)]


def new_draw(seed: int) -> Draw:
    return Draw(random.Random(seed), failed=list(FAILED), repair_cap=2)


def child_of(job) -> Child | None:
    """What an operator makes, from the job alone: sometimes nothing, sometimes a kernel the run
    already has (both cost an attempt and are drawn again), mostly a new one."""
    if job.seed % 4 == 0:
        return None
    if job.seed % 5 == 0:
        return Child("the same kernel again", job.operator.name)
    return Child(f"{job.operator.name} of {[p.id for p in job.parents]} ({job.seed})", job.operator.name)


def search(seed: int, archive: list[str], stop_after: int | None = None, made_before: tuple[str, ...] = ()):
    """One island's generation into `archive` (the children's hashes, in the order kept); stops
    once `stop_after` children are in the archive, as a killed command would."""
    def keep(job, child, h):
        if h in archive:
            return False
        archive.append(h)
        return True

    brood = Brood(WANTED, made_before, POPULATION, Tournament())
    return breed(brood, new_draw(seed), lambda: OPERATORS, lambda jobs: [child_of(j) for j in jobs], keep,
                 lambda: stop_after is not None and len(archive) >= stop_after)


def test_drawing_in_pieces_draws_what_one_drawing_does():
    whole = draw_jobs(new_draw(7), 9, OPERATORS, POPULATION, Tournament())
    for split in range(10):
        draw = new_draw(7)
        pieces = draw_jobs(draw, split, OPERATORS, POPULATION, Tournament()) + \
            draw_jobs(draw, 9 - split, OPERATORS, POPULATION, Tournament())
        assert [(j.operator.name, [p.id for p in j.parents], j.seed) for j in pieces] == \
               [(j.operator.name, [p.id for p in j.parents], j.seed) for j in whole]


def test_repairs_take_the_failures_first_up_to_the_allotment():
    jobs = draw_jobs(new_draw(3), 5, OPERATORS, POPULATION, Tournament())
    assert [(j.operator.name, j.parents[0].id) for j in jobs[:2]] == [("repair", 5), ("repair", 6)]
    assert all(j.operator is not REPAIR for j in jobs[2:])
    first = draw_jobs(Draw(random.Random(3), list(FAILED), repair_cap=2), 3, OPERATORS, POPULATION, Tournament(),
                      mutations_only=True)
    assert all(j.operator is MUTATE for j in first)  # generation 0: mutants of the start, no repair


@pytest.mark.parametrize("seed", [0, 1, 2, 11])
def test_a_generation_interrupted_at_each_point_resumes_to_the_children_of_an_unbroken_one(seed):
    unbroken: list[str] = []
    assert search(seed, unbroken) == WANTED
    for stop in range(WANTED + 1):
        archive: list[str] = []
        search(seed, archive, stop_after=stop)
        assert archive == unbroken[:stop]
        search(seed, archive, made_before=tuple(archive))  # the next command, same seed
        assert archive == unbroken, f"stopped after {stop} children"
        search(seed, archive, made_before=tuple(archive))  # a finished generation adds nothing
        assert archive == unbroken


def test_these_streams_draw_nothings_and_repeats_that_cost_attempts():
    draw = new_draw(0)
    jobs = draw_jobs(draw, 60, OPERATORS, POPULATION, Tournament())
    made = [child_of(j) for j in jobs]
    assert None in made and sum(c is not None and c.source == "the same kernel again" for c in made) > 1
    archive: list[str] = []
    search(0, archive)
    assert code_hash("the same kernel again") in archive


def test_a_different_island_stream_breeds_different_children():
    a: list[str] = []
    b: list[str] = []
    search(0, a)
    search(1, b)
    assert a != b
