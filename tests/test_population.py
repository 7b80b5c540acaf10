"""Island policies: fitness order, (mu + lambda) replacement, ring migration."""
import random

from archives.records import Candidate, Evaluation
from evolve.policies import Elitist, Ring, Tournament
from evolve.population import Kernel


def k(i, speedup=None, passed=True, stage="timed", h=None):
    evaluation = Evaluation(i, stage, passed, passed, passed, speedup, "", "")
    return Kernel(Candidate(i, 1, "t", 0, 0, f"src{i}", h or f"h{i}", (), "op", "", evaluation=evaluation))


def test_fitness_orders_correct_before_fast_before_far():
    broken_late = k(1, passed=False, stage="call")
    broken_early = k(2, passed=False, stage="parse")
    slow, fast = k(3, 0.5), k(4, 2.0)
    ranked = sorted([broken_early, fast, broken_late, slow], key=lambda x: x.fitness, reverse=True)
    assert [x.id for x in ranked] == [4, 3, 1, 2]


def test_mu_plus_lambda_keeps_the_best_and_counts_a_kernel_once():
    pop = [k(1, 1.0), k(2, 0.8)]
    kids = [k(3, 1.2), k(4, 0.1), k(5, 9.0, passed=False), k(6, 1.0, h="h1")]
    survivors = Elitist().survivors(pop, kids, 2)
    assert [s.id for s in survivors] == [3, 1]


def test_migration_moves_the_best_along_the_ring():
    islands = [[k(10, 3.0), k(11, 0.1)], [k(20, 2.0), k(21, 0.2)], [k(30, 1.0), k(31, 0.3)]]
    Ring(migrants=1).migrate(islands, random.Random(0))
    ids = [sorted(x.id for x in pop) for pop in islands]
    # island i's best replaced island i+1's worst; the last one's best went to island 0
    assert ids == [[10, 30], [10, 20], [20, 30]]
    # migrants are copies: changing one island cannot reach into another
    assert islands[1][[x.id for x in islands[1]].index(10)] is not islands[0][0]


def test_tournament_parents_are_reproducible():
    pop = [k(i, float(i)) for i in range(1, 9)]
    a = [p.id for p in Tournament().parents(pop, 5, random.Random(42))]
    b = [p.id for p in Tournament().parents(pop, 5, random.Random(42))]
    assert a == b and set(a) <= set(range(1, 9))


def test_a_migrant_the_next_island_already_holds_stays_home():
    start = k(1, 1.0)  # the starting kernel is on every island
    islands = [[start.copy(), k(11, 0.5)], [start.copy(), k(21, 0.7)]]
    Ring(migrants=1).migrate(islands, random.Random(0))
    ids = [sorted(x.id for x in pop) for pop in islands]
    assert ids == [[1, 11], [1, 21]]  # no island gave up a distinct kernel for a second copy
    assert all(len({x.code_hash for x in pop}) == len(pop) for pop in islands)
