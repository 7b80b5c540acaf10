"""The measuring turn's helpers (fitness.engine.baseline_child): StepClock, ShapeKey, SeedBank, BaselineChild."""
import contextlib
from types import SimpleNamespace

import pytest

from fitness.engine import baseline_child
from fitness.engine.baseline_child import BaselineChild, SeedBank, ShapeKey, StepClock


# -- StepClock ----------------------------------------------------------------------------------------
@pytest.fixture()
def clock_at(monkeypatch):
    """The module's clock, set by the test: now[0] is the time time.monotonic() reads."""
    now = [100.0]
    monkeypatch.setattr(baseline_child, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def test_each_tick_adds_the_seconds_since_the_last_tick_to_its_step(clock_at):
    into: dict = {}
    clock = StepClock(into)
    clock_at[0] = 101.5
    clock.tick("sets")
    clock_at[0] = 104.0
    clock.tick("trials")
    assert into == {"sets": 1.5, "trials": 2.5}


def test_a_step_ticked_again_accumulates_and_steps_already_in_the_dict_are_added_to(clock_at):
    into = {"trials": 10.0, "other": 1.0}
    clock = StepClock(into)
    for t, step in ((101.0, "trials"), (101.25, "checks"), (103.0, "trials")):
        clock_at[0] = t
        clock.tick(step)
    assert into == {"trials": 10.0 + 1.0 + 1.75, "checks": 0.25, "other": 1.0}


def test_a_clock_counts_from_when_it_was_made():
    into: dict = {}
    clock = StepClock(into)
    clock.tick("a")
    assert 0.0 <= into["a"] < 0.5


# -- ShapeKey -----------------------------------------------------------------------------------------
def test_a_shape_key_s_task_key_is_its_suite_task_and_baseline_whatever_the_shape_and_dtype():
    a = ShapeKey("builtin", "softmax", "M=64,N=256", "float32", 7)
    b = ShapeKey("builtin", "softmax", "M=128,N=512", "float16", 7)
    assert a.task_key == b.task_key == ("builtin", "softmax", 7)
    assert a != b and len({a, b}) == 2  # the shapes themselves are timed apart
    assert ShapeKey("builtin", "softmax", "M=64,N=256", "float32", 8).task_key != a.task_key
    assert ShapeKey("other", "softmax", "M=64,N=256", "float32", 7).task_key != a.task_key


def test_a_shape_key_is_equal_to_one_built_alike_and_reads_by_name():
    a = ShapeKey("s", "t", "N=4", "float32", None)
    assert a == ShapeKey("s", "t", "N=4", "float32", None) and hash(a) == hash(ShapeKey(*a))
    assert (a.suite, a.task, a.shape, a.dtype, a.baseline) == ("s", "t", "N=4", "float32", None)


# -- SeedBank -----------------------------------------------------------------------------------------
KEY = ("builtin", "softmax", 0)


def test_an_epoch_s_seeds_are_distinct_and_the_same_each_time_they_are_asked_for():
    bank = SeedBank()
    first = bank.seeds(KEY, 0)
    assert len(first) == 3 == len(set(first)) and all(isinstance(s, int) and s >= 0 for s in first)
    assert bank.seeds(KEY, 0) == first
    assert bank.seeds(KEY, 0) is not bank.seeds(KEY, 0)  # a copy: a caller's change stays its own


def test_the_shapes_of_one_task_share_each_epoch_s_seeds_and_other_tasks_draw_their_own():
    bank = SeedBank()
    softmax = bank.seeds(ShapeKey("builtin", "softmax", "M=64", "float32", 0).task_key, 2)
    assert bank.seeds(ShapeKey("builtin", "softmax", "M=128", "float16", 0).task_key, 2) == softmax
    assert bank.seeds(ShapeKey("builtin", "row_sum", "M=64", "float32", 0).task_key, 2) != softmax
    assert bank.seeds(ShapeKey("builtin", "softmax", "M=64", "float32", 1).task_key, 2) != softmax


def test_each_epoch_draws_fresh_seeds():
    bank = SeedBank()
    epochs = [bank.seeds(KEY, n) for n in range(4)]
    assert len({tuple(e) for e in epochs}) == 4


def test_a_later_epoch_asked_first_leaves_the_earlier_ones_to_be_drawn_when_asked():
    bank = SeedBank()
    third = bank.seeds(KEY, 2)
    first = bank.seeds(KEY, 0)
    assert len(first) == 3 and first != third and bank.seeds(KEY, 2) == third


def test_asking_for_more_seeds_keeps_the_ones_given_and_fewer_gives_their_first():
    bank = SeedBank()
    three = bank.seeds(KEY, 0)
    five = bank.seeds(KEY, 0, count=5)
    assert five[:3] == three and len(set(five)) == 5
    assert bank.seeds(KEY, 0, count=2) == three[:2]
    assert bank.seeds(KEY, 0) == three


def test_seeds_drawn_the_same_are_drawn_again_until_distinct(monkeypatch):
    draws = iter([5, 5, 6, 5, 7])
    monkeypatch.setattr(baseline_child, "fresh_seed", lambda: next(draws))
    assert SeedBank().seeds(KEY, 0) == [5, 6, 7]


# -- BaselineChild (a stand-in pool: no process is started) -------------------------------------------
class _Pool:
    """Hands out children as WorkerPool.child() does, noting which were given back."""

    def __init__(self) -> None:
        self.made: list[SimpleNamespace] = []
        self.returned: list[SimpleNamespace] = []

    @contextlib.contextmanager
    def child(self):
        c = SimpleNamespace(dead=False, n=len(self.made))
        self.made.append(c)
        try:
            yield c
        finally:
            self.returned.append(c)


def test_the_baseline_child_is_kept_while_alive_and_replaced_once_dead():
    pool = _Pool()
    base = BaselineChild(pool)
    first = base.get()
    assert base.get() is first and pool.made == [first] and pool.returned == []
    first.dead = True
    second = base.get()
    assert second is not first and pool.returned == [first]  # the dead one given back before the next
    base.close()
    assert pool.returned == [first, second]
    third = base.get()  # closed: a fresh one
    assert third is not second and len(pool.made) == 3


def test_closing_a_baseline_child_never_started_or_closed_twice_gives_nothing_back():
    pool = _Pool()
    base = BaselineChild(pool)
    base.close()
    base.get()
    base.close()
    base.close()
    assert len(pool.returned) == 1


def test_a_turn_made_without_a_baseline_pool_cannot_get_a_baseline_child():
    base = BaselineChild(None)
    base.close()  # nothing to close
    with pytest.raises(AssertionError, match="without a baseline pool"):
        base.get()
