"""A/A sentinels: the timing's noise measured while a search runs, not only on an idle GPU.

Every `every`-th evaluation a searching command submits, the starting kernel of that
evaluation's task is timed once more, against itself: the baseline child runs the same kernel
(fitness.engine.judges: the suite's kernel for script tasks, the starting kernel for function tasks).
The ratio's distance from 1 is the noise a candidate's speedup carries under the search's own
load (correctness children compiling and running beside the measuring turn). The archive keeps
each sentinel (table `sentinels`); the command's closing line and the report give the median
and p90 of |A/A - 1| over the session.
"""
from __future__ import annotations

import threading
from concurrent.futures import Executor, Future

from archives.archive import Archive
from suites.task import Task


class Sentinels:
    def __init__(self, every: int, archive: Archive, run_id: int, evaluator, pool: Executor, stop: threading.Event):
        """`every`: evaluations between sentinels (0: none); only where the evaluator times (GPU)."""
        self.every = every if getattr(evaluator, "gpu", False) else 0
        self.archive, self.run_id, self.evaluator, self.pool, self.stop = archive, run_id, evaluator, pool, stop
        self._count = 0
        self._lock = threading.Lock()
        self.futures: list[Future] = []

    def after_submit(self, task: Task) -> None:
        """Counts one evaluation of `task`; on every `every`-th, times its starting kernel A/A."""
        if not self.every or not task.start_source:
            return
        with self._lock:
            self._count += 1
            due = self._count % self.every == 0
        if due:
            self.futures.append(self.pool.submit(self._time, task))

    def _time(self, task) -> None:
        if self.stop.is_set():
            return
        v = self.evaluator.evaluate(task, task.start_source, cancel=self.stop.is_set, aa=True)
        if v is not None and v.stage == "timed":
            self.archive.add_sentinel(self.run_id, task.name, v.speedup, v.to_dict())
