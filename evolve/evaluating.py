"""What the search needs of an evaluator (fitness.engine.evaluator.Evaluator, or the Dask cluster's
fitness.engine.cluster.ClusterEvaluator): the engine depends on this, not on either class."""
from __future__ import annotations

from typing import Callable, Protocol

from fitness.engine.evaluator import UnitStats
from fitness.engine.verdict import Verdict
from suites.task import Task


class SearchEvaluator(Protocol):
    gpu: bool  # it times on a GPU (else correctness only)

    @property
    def gpus(self) -> int: ...

    @property
    def workers(self) -> int: ...  # correctness workers

    @property
    def parallelism(self) -> int: ...  # candidates in flight at once

    @property
    def measuring_s(self) -> float: ...  # the GPU's measuring turn held, seconds

    @property
    def correctness_busy_s(self) -> float: ...

    def evaluate(self, task: Task, source: str | bytes, timed: bool = True,
                 cancel: Callable[[], bool] | None = None, aa: bool = False) -> Verdict | None: ...

    def retime(self, task: Task, source: str) -> Verdict: ...

    def units(self, evaluations: int) -> list[UnitStats]: ...

    def close(self) -> None: ...
