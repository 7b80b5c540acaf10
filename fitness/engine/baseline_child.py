"""The measuring turn's helpers (fitness.engine.measuring): a long-lived clean baseline child with the
lock of its conversation, the key of a timed shape, the seeds of each epoch's draws, and a clock
of the turn's steps."""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import NamedTuple

from fitness.engine.judges import fresh_seed
from fitness.engine.pool import ChildProcess, WorkerFailure, WorkerPool

logger = logging.getLogger(__name__)


class BaselineChild:
    """One long-lived clean baseline child (it loads only the suite's code, never a candidate's)
    and the lock of its conversation: the turn and the preparing outside it take it in turn."""

    def __init__(self, pool: WorkerPool | None):
        self.pool, self.lock = pool, threading.Lock()
        self._child: ChildProcess | None = None
        self._cm: contextlib.AbstractContextManager[ChildProcess] | None = None

    def get(self) -> ChildProcess:
        if self._child is None or self._child.dead:
            self.close()
            assert self.pool is not None, "a turn made without a baseline pool is given its baseline side"
            self._cm = self.pool.child()
            self._child = self._cm.__enter__()
        return self._child

    def close(self) -> None:
        """The child given back. What its slot's check finds then (e.g. without a sandbox, a file
        another process left in the machine's /dev/shm: GPU run, issue 39's no-sandbox test) is
        logged: no evaluation is in it to fail, and raising would stop the evaluator's close."""
        if self._child is not None and self._cm is not None:
            try:
                self._cm.__exit__(None, None, None)
            except WorkerFailure as e:
                logger.warning("a clean child given back: %s", e)
            finally:
                self._child = None


class StepClock:
    """Seconds per step, added into `into`."""

    def __init__(self, into: dict):
        self.into, self.t = into, time.monotonic()

    def tick(self, step: str) -> None:
        now = time.monotonic()
        self.into[step] = self.into.get(step, 0.0) + now - self.t
        self.t = now


class ShapeKey(NamedTuple):
    """A timed shape against one baseline (the reference, or a kernel's source)."""

    suite: str
    task: str
    shape: str
    dtype: str
    baseline: int  # hash of the baseline's source (None: the task's reference)

    @property
    def task_key(self) -> tuple[str, str, int]:
        """The task against its baseline: whose shapes share each epoch's seeds (SeedBank)."""
        return self.suite, self.task, self.baseline


class SeedBank:
    """The seeds of each epoch of draws, by task (and baseline): fresh, and shared by the
    task's shapes, whose epochs turn together. A perf file that makes every shape at each draw
    (TritonBench matmul_dequant_int4 quantizes its 31 weights in Python loops) is then drawn once
    per seed in a clean child, not once per shape and seed (suites.tritonbench keeps the draw)."""

    def __init__(self) -> None:
        self._bank: dict[tuple[str, str, int], list[list[int]]] = {}

    def seeds(self, task_key: tuple[str, str, int], nth: int, count: int = 3) -> list[int]:
        """The `nth` epoch's `count` seeds (distinct); callers serialise (fitness.engine.measuring's epoch lock)."""
        bank = self._bank.setdefault(task_key, [])
        while len(bank) <= nth:
            bank.append([])
        seeds = bank[nth]
        while len(seeds) < count:
            s = fresh_seed()
            if s not in seeds:
                seeds.append(s)
        return seeds[:count]
