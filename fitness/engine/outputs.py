"""The engine's oracle for a function task's outputs: its float64 reference, computed here or, on
a GPU, in the reference service's clean children (fitness.engine.reference_service). The stages
and judges are handed it (as OutputsChecker) instead of the evaluator."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from fitness.common.compare import compare_where_room
from fitness.common.reference import ReferenceCache, compare_case, with_variant
from suites.task import Task

if TYPE_CHECKING:  # only named here: the service's module imports the judges' (a cycle at run time)
    from fitness.engine.reference_service import ReferenceService


class OutputsChecker(Protocol):
    """What a stage asks of the oracle: a case's reference made ready early, and a verdict on outputs."""

    def prefetch(self, task: Task, case: dict) -> None: ...

    def check_case(self, task: Task, case: dict, outputs: Any) -> str: ...


class EngineOracle:
    def __init__(self, references: ReferenceCache, service: ReferenceService | None = None):
        self.references, self.service = references, service

    def prefetch(self, task: Task, case: dict) -> None:
        """The case's reference computed while its outputs are on their way."""
        (self.service or self.references).prefetch(task, case)

    def check_case(self, task: Task, case: dict, outputs: Any) -> str:
        """'' or what is wrong with a child's `outputs` (as they came, on the CPU) for `case`."""
        if outputs is None:
            return "no outputs returned"
        if self.service is not None:
            problem = self.service.check(task, case, outputs)
            if problem is not None:
                return with_variant(problem, case)
        refs, expected = self.references.get(task, case)  # here: no GPU, or no reference child answered
        problem = compare_where_room(self.references.device,
                                     lambda o, r: compare_case(task, o, r, expected, case), outputs, refs)
        return with_variant(problem, case)
